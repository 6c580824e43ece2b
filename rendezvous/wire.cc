#include "rendezvous/wire.h"

namespace mitra::rendezvous {
namespace {

std::string Header() {
  std::string h(kMagic);
  h += static_cast<char>(kVersion);
  return h;
}

bool HasHeader(std::string_view bytes) { return bytes.substr(0, kMagic.size() + 1) == Header(); }

void PutU32(std::string& out, uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) out += static_cast<char>((v >> shift) & 0xff);
}
void PutI64(std::string& out, int64_t value) {
  const auto v = static_cast<uint64_t>(value);
  for (int shift = 56; shift >= 0; shift -= 8) out += static_cast<char>((v >> shift) & 0xff);
}
void PutString(std::string& out, std::string_view s) {
  PutU32(out, static_cast<uint32_t>(s.size()));
  out.append(s);
}

uint32_t ReadU32(std::string_view bytes) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v = (v << 8) | static_cast<uint8_t>(bytes[i]);
  return v;
}

// Reads a body front to back; the first read past its end sets `failed`.
class Reader {
 public:
  explicit Reader(std::string_view body) : body_(body) {}
  bool failed() const { return failed_; }
  bool at_end() const { return pos_ == body_.size(); }

  uint8_t U8() {
    if (!Has(1)) return 0;
    return static_cast<uint8_t>(body_[pos_++]);
  }
  uint32_t U32() {
    if (!Has(4)) return 0;
    const uint32_t v = ReadU32(body_.substr(pos_));
    pos_ += 4;
    return v;
  }
  int64_t I64() {
    if (!Has(8)) return 0;
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v = (v << 8) | static_cast<uint8_t>(body_[pos_++]);
    return static_cast<int64_t>(v);
  }
  std::string String() {
    const uint32_t n = U32();
    if (!Has(n)) return {};
    std::string s(body_.substr(pos_, n));
    pos_ += n;
    return s;
  }

 private:
  bool Has(size_t n) {
    if (failed_ || body_.size() - pos_ < n) {
      failed_ = true;
      return false;
    }
    return true;
  }
  std::string_view body_;
  size_t pos_ = 0;
  bool failed_ = false;
};

// How many keys each op takes: exactly one, or any number from one.
bool KeysFit(Op op, size_t keys) {
  switch (op) {
    case Op::kCheck:
    case Op::kWait:
      return keys >= 1;
    case Op::kNumKeys:
      return keys == 0;
    default:
      return keys == 1;
  }
}

}  // namespace

// ---- Handshake ---------------------------------------------------------------------------

std::string Hello(const Bytes32& server_nonce) { return Header() + std::string(AsText(server_nonce)); }

Result<Bytes32> ReadHello(std::string_view hello) {
  if (hello.size() != kHelloBytes || !HasHeader(hello)) {
    return Status::InvalidArgument("the peer is not a mitra rendezvous store of this version");
  }
  return Bytes32From(hello.substr(kMagic.size() + 1));
}

std::string Proof(const JobToken& token, const Bytes32& server_nonce, const Bytes32& client_nonce) {
  return Header() + std::string(AsText(client_nonce)) +
         std::string(AsText(Hmac(token.key(), {"client", AsText(server_nonce), AsText(client_nonce)})));
}

Result<Bytes32> CheckProof(const JobToken& token, const Bytes32& server_nonce,
                           std::string_view proof) {
  if (proof.size() != kProofBytes || !HasHeader(proof)) {
    return Status::InvalidArgument("not a mitra rendezvous client of this version");
  }
  const Bytes32 client_nonce = Bytes32From(proof.substr(kMagic.size() + 1));
  const Bytes32 expected = Hmac(token.key(), {"client", AsText(server_nonce), AsText(client_nonce)});
  if (!SameTag(expected, Bytes32From(proof.substr(kMagic.size() + 1 + 32)))) {
    return Status::InvalidArgument("the proof of the job token is wrong");
  }
  return client_nonce;
}

std::string Answer(const JobToken& token, const Bytes32& server_nonce, const Bytes32& client_nonce) {
  return std::string(AsText(Hmac(token.key(), {"server", AsText(server_nonce), AsText(client_nonce)})));
}

bool CheckAnswer(const JobToken& token, const Bytes32& server_nonce, const Bytes32& client_nonce,
                 std::string_view answer) {
  return answer.size() == kAnswerBytes &&
         SameTag(Hmac(token.key(), {"server", AsText(server_nonce), AsText(client_nonce)}),
                 Bytes32From(answer.substr(0)));
}

// ---- Frames --------------------------------------------------------------------------------

Channel::Channel(const JobToken& token, const Bytes32& server_nonce, const Bytes32& client_nonce,
                 Side side)
    : session_key_(Hmac(token.key(), {"session", AsText(server_nonce), AsText(client_nonce)})),
      send_direction_(side == Side::kServer ? 's' : 'c'),
      receive_direction_(side == Side::kServer ? 'c' : 's') {}

Bytes32 Channel::Tag(char direction, uint64_t sequence, std::string_view body) const {
  std::string prefix(1, direction);
  PutI64(prefix, static_cast<int64_t>(sequence));
  return Hmac(session_key_, {prefix, body});
}

std::string Channel::Seal(std::string_view body) {
  std::string frame;
  frame.reserve(kFrameHeaderBytes + body.size() + kTagBytes);
  PutU32(frame, static_cast<uint32_t>(body.size()));
  frame.append(body);
  frame.append(AsText(Tag(send_direction_, sent_++, body)));
  return frame;
}

void Channel::Feed(std::string_view bytes) {
  // What was read goes once it is half the buffer: a stream that never ends on a frame's end
  // keeps at most twice what it has not yet yielded.
  if (read_ > 0 && read_ >= buffer_.size() / 2) {
    buffer_.erase(0, read_);
    read_ = 0;
  }
  buffer_.append(bytes);
}

std::optional<Result<std::string>> Channel::Next() {
  if (broken_) return Result<std::string>(*broken_);
  const std::string_view pending = std::string_view(buffer_).substr(read_);
  if (pending.size() < kFrameHeaderBytes) return std::nullopt;
  const uint32_t length = ReadU32(pending);
  if (length > kMaxBody) {
    broken_ = Status::InvalidArgument("a frame of " + std::to_string(length) +
                                      " bytes, over the limit of " + std::to_string(kMaxBody));
    return Result<std::string>(*broken_);
  }
  if (pending.size() < kFrameHeaderBytes + length + kTagBytes) return std::nullopt;
  const std::string_view body = pending.substr(kFrameHeaderBytes, length);
  if (!SameTag(Tag(receive_direction_, received_, body),
               Bytes32From(pending.substr(kFrameHeaderBytes + length)))) {
    broken_ = Status::InvalidArgument("a frame whose tag is wrong (altered, replayed or forged)");
    return Result<std::string>(*broken_);
  }
  ++received_;
  std::string out(body);
  read_ += kFrameHeaderBytes + length + kTagBytes;
  if (read_ == buffer_.size()) {
    buffer_.clear();
    read_ = 0;
  }
  return Result<std::string>(std::move(out));
}

// ---- Requests and responses ------------------------------------------------------------

std::string Encode(const Request& request) {
  std::string body(1, static_cast<char>(request.op));
  PutI64(body, request.number);
  PutU32(body, static_cast<uint32_t>(request.keys.size()));
  for (const std::string& key : request.keys) PutString(body, key);
  PutString(body, request.value);
  PutString(body, request.expected);
  return body;
}

Result<Request> DecodeRequest(std::string_view body) {
  Reader in(body);
  Request r;
  const uint8_t op = in.U8();
  if (op < static_cast<uint8_t>(Op::kSet) || op > static_cast<uint8_t>(Op::kWait)) {
    return Status::InvalidArgument("unknown request " + std::to_string(op));
  }
  r.op = static_cast<Op>(op);
  r.number = in.I64();
  const uint32_t keys = in.U32();
  if (keys > kMaxKeysPerRequest) {
    return Status::InvalidArgument(std::to_string(keys) + " keys in one request, over the limit of " +
                                   std::to_string(kMaxKeysPerRequest));
  }
  for (uint32_t i = 0; i < keys && !in.failed(); ++i) r.keys.push_back(in.String());
  r.value = in.String();
  r.expected = in.String();
  if (in.failed()) return Status::InvalidArgument("a request cut short");
  if (!in.at_end()) return Status::InvalidArgument("bytes after a request");
  if (!KeysFit(r.op, r.keys.size())) {
    return Status::InvalidArgument(std::string(OpName(r.op)) + " with " + std::to_string(keys) +
                                   " keys");
  }
  return r;
}

std::string Encode(const Response& response) {
  std::string body(1, static_cast<char>(response.reply));
  PutI64(body, response.number);
  PutString(body, response.value);
  return body;
}

Result<Response> DecodeResponse(std::string_view body) {
  Reader in(body);
  Response r;
  const uint8_t reply = in.U8();
  if (reply < static_cast<uint8_t>(Reply::kOk) || reply > static_cast<uint8_t>(Reply::kError)) {
    return Status::InvalidArgument("unknown response " + std::to_string(reply));
  }
  r.reply = static_cast<Reply>(reply);
  r.number = in.I64();
  r.value = in.String();
  if (in.failed()) return Status::InvalidArgument("a response cut short");
  if (!in.at_end()) return Status::InvalidArgument("bytes after a response");
  return r;
}

std::string_view OpName(Op op) {
  switch (op) {
    case Op::kSet: return "set";
    case Op::kGet: return "get";
    case Op::kAdd: return "add";
    case Op::kCompareSet: return "compare-set";
    case Op::kDelete: return "delete";
    case Op::kCheck: return "check";
    case Op::kNumKeys: return "count keys";
    case Op::kWait: return "wait";
  }
  return "?";
}

}  // namespace mitra::rendezvous
