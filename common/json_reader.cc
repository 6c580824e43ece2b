#include "common/json_reader.h"

#include <charconv>

#include "common/strings.h"

namespace mitra::detail {
namespace {

// Recursive-descent reader over one text. Scalars become JsonValues; nested arrays and objects
// are validated and returned as their raw text.
class Reader {
 public:
  explicit Reader(std::string_view text) : text_(text) {}

  Result<JsonObject> ReadTopObject() {
    SkipSpace();
    if (pos_ >= text_.size() || text_[pos_] != '{') {
      return Error("expected '{' at the start of an object");
    }
    JsonObject object;
    if (!ReadContainer(&object, 0)) return Error(error_);
    SkipSpace();
    if (pos_ != text_.size()) return Error("unexpected text after the object");
    return object;
  }

 private:
  static constexpr int kMaxDepth = 64;

  Status Error(const std::string& what) const {
    return Status::InvalidArgument("JSON: " + what + " (at byte " + std::to_string(pos_) + ")");
  }

  bool Fail(std::string what) {
    if (error_.empty()) error_ = std::move(what);
    return false;
  }

  void SkipSpace() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\t' ||
                                   text_[pos_] == '\n' || text_[pos_] == '\r')) {
      ++pos_;
    }
  }

  bool Consume(char c) {
    if (pos_ < text_.size() && text_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }

  bool ConsumeWord(std::string_view word) {
    if (text_.substr(pos_, word.size()) != word) return false;
    pos_ += word.size();
    return true;
  }

  bool ReadValue(JsonValue* out, int depth) {
    if (pos_ >= text_.size()) return Fail("expected a value");
    const char c = text_[pos_];
    if (c == '"') {
      std::string s;
      if (!ReadString(&s)) return false;
      *out = JsonValue::String(std::move(s));
      return true;
    }
    if (c == '{' || c == '[') {
      const size_t begin = pos_;
      if (!ReadContainer(nullptr, depth + 1)) return false;
      *out = JsonValue::Raw(std::string(text_.substr(begin, pos_ - begin)));
      return true;
    }
    if (ConsumeWord("true")) {
      *out = JsonValue::Bool(true);
    } else if (ConsumeWord("false")) {
      *out = JsonValue::Bool(false);
    } else if (ConsumeWord("null")) {
      *out = JsonValue();
    } else {
      return ReadNumber(out);
    }
    return true;
  }

  // JSON number grammar: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
  bool ReadNumber(JsonValue* out) {
    const size_t begin = pos_;
    auto digits = [&] {
      const size_t start = pos_;
      while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') ++pos_;
      return pos_ - start;
    };
    Consume('-');
    if (!Consume('0') && digits() == 0) {
      pos_ = begin;
      return Fail("expected a value (string, number, true, false, null, object or array)");
    }
    if (Consume('.') && digits() == 0) return Fail("expected digits after '.'");
    if (Consume('e') || Consume('E')) {
      if (!Consume('+')) Consume('-');
      if (digits() == 0) return Fail("expected digits in the exponent");
    }
    const std::string_view literal = text_.substr(begin, pos_ - begin);
    const std::optional<double> value = ParseDouble(literal);
    if (!value) return Fail("number out of range: " + std::string(literal));
    // Written back in shortest round-trip form: the value is kept exactly, the spelling not
    // ("1.50" comes back as "1.5").
    *out = JsonValue::Number(*value);
    return true;
  }

  bool ReadString(std::string* out) {
    if (!Consume('"')) return Fail("expected a string");
    while (pos_ < text_.size()) {
      const char c = text_[pos_++];
      if (c == '"') return true;
      if (static_cast<unsigned char>(c) < 0x20) return Fail("control character in a string");
      if (c != '\\') {
        out->push_back(c);
        continue;
      }
      if (pos_ >= text_.size()) break;
      const char e = text_[pos_++];
      switch (e) {
        case '"':
          out->push_back('"');
          break;
        case '\\':
          out->push_back('\\');
          break;
        case '/':
          out->push_back('/');
          break;
        case 'b':
          out->push_back('\b');
          break;
        case 'f':
          out->push_back('\f');
          break;
        case 'n':
          out->push_back('\n');
          break;
        case 'r':
          out->push_back('\r');
          break;
        case 't':
          out->push_back('\t');
          break;
        case 'u':
          if (!ReadUnicodeEscape(out)) return false;
          break;
        default:
          return Fail(std::string("unknown escape '\\") + e + "'");
      }
    }
    return Fail("unterminated string");
  }

  bool ReadHex4(uint32_t* out) {
    if (pos_ + 4 > text_.size()) return Fail("expected 4 hex digits after \\u");
    auto [ptr, ec] = std::from_chars(text_.data() + pos_, text_.data() + pos_ + 4, *out, 16);
    if (ec != std::errc() || ptr != text_.data() + pos_ + 4) {
      return Fail("expected 4 hex digits after \\u");
    }
    pos_ += 4;
    return true;
  }

  bool ReadUnicodeEscape(std::string* out) {
    uint32_t cp = 0;
    if (!ReadHex4(&cp)) return false;
    if (cp >= 0xD800 && cp <= 0xDBFF) {  // a high surrogate must be followed by a low one
      uint32_t low = 0;
      if (!ConsumeWord("\\u") || !ReadHex4(&low) || low < 0xDC00 || low > 0xDFFF) {
        return Fail("unpaired UTF-16 surrogate in \\u escape");
      }
      cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
    } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
      return Fail("unpaired UTF-16 surrogate in \\u escape");
    }
    if (cp < 0x80) {
      out->push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
      out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
      out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
      out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
      out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else {
      out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
      out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
      out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
    return true;
  }

  // Reads the object or array at pos_. The members of an object go to `out`; with
  // out == nullptr (nested values, kept as raw text) they are only validated.
  bool ReadContainer(JsonObject* out, int depth) {
    if (depth > kMaxDepth) return Fail("nested deeper than 64 levels");
    const bool is_object = text_[pos_] == '{';
    const char close = is_object ? '}' : ']';
    ++pos_;
    SkipSpace();
    if (Consume(close)) return true;
    while (true) {
      SkipSpace();
      std::string key;
      if (is_object) {
        if (pos_ >= text_.size() || text_[pos_] != '"') return Fail("expected a string key");
        if (!ReadString(&key)) return false;
        SkipSpace();
        if (!Consume(':')) return Fail("expected ':' after a key");
        SkipSpace();
      }
      JsonValue value;
      if (!ReadValue(&value, depth)) return false;
      if (out != nullptr) out->Set(std::move(key), std::move(value));
      SkipSpace();
      if (Consume(close)) return true;
      if (!Consume(',')) return Fail(std::string("expected ',' or '") + close + "' after a value");
    }
  }

  std::string_view text_;
  size_t pos_ = 0;
  std::string error_;
};

}  // namespace

Result<JsonObject> ReadJsonObject(std::string_view text) { return Reader(text).ReadTopObject(); }

}  // namespace mitra::detail
