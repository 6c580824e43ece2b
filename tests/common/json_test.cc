#include "common/json.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace mitra {
namespace {

TEST(Json, WritesFieldsInInsertionOrder) {
  JsonObject o;
  o.SetString("event", "step").SetInt("step", 3).SetNumber("loss", 2.5).SetBool("ok", true);
  o.Set("none", JsonValue());
  EXPECT_EQ(o.ToJson(), R"({"event":"step","step":3,"loss":2.5,"ok":true,"none":null})");
}

TEST(Json, SetReplacesAnExistingKeyInPlace) {
  JsonObject o;
  o.SetInt("a", 1).SetInt("b", 2).SetInt("a", 3);
  EXPECT_EQ(o.ToJson(), R"({"a":3,"b":2})");
  EXPECT_TRUE(o.Erase("a"));
  EXPECT_FALSE(o.Erase("a"));
  EXPECT_EQ(o.ToJson(), R"({"b":2})");
}

TEST(Json, EscapesStrings) {
  EXPECT_EQ(JsonQuote("a\"b\\c\n\t\x01"), R"("a\"b\\c\n\t\u0001")");
  EXPECT_EQ(JsonQuote("h\xc3\xa9"), "\"h\xc3\xa9\"");  // UTF-8 passes through
}

TEST(Json, NonFiniteNumbersBecomeNull) {
  EXPECT_EQ(JsonValue::Number(std::nan("")).ToJson(), "null");
  EXPECT_EQ(JsonValue::Number(std::numeric_limits<double>::infinity()).ToJson(), "null");
}

TEST(Json, NumbersUseTheShortestExactForm) {
  EXPECT_EQ(JsonValue::Number(0.1).ToJson(), "0.1");
  EXPECT_EQ(JsonValue::Number(3.0).ToJson(), "3");
  EXPECT_EQ(JsonValue::Number(1.7e9 + 0.25).ToJson(), "1700000000.25");
  EXPECT_EQ(JsonValue::Int(-42).ToJson(), "-42");
}

TEST(Json, ArraysAreWrittenAsRawJson) {
  EXPECT_EQ(JsonValue::IntArray({1, 2, 3}).ToJson(), "[1,2,3]");
  EXPECT_EQ(JsonValue::IntArray({}).ToJson(), "[]");
  EXPECT_EQ(JsonValue::StringArray({"a", "b\"c"}).ToJson(), R"(["a","b\"c"])");
}

TEST(Json, ParsesAWorkerStepRecord) {
  Result<JsonObject> o = JsonObject::Parse(
      R"({"event":"step","step":12,"loss":3.25,"tokens_per_s":1.5e4,"ok":false,"x":null})");
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  EXPECT_EQ(o->GetString("event"), "step");
  EXPECT_EQ(o->GetNumber("step"), 12);
  EXPECT_EQ(o->GetNumber("loss"), 3.25);
  EXPECT_EQ(o->GetNumber("tokens_per_s"), 15000);
  EXPECT_FALSE(o->Find("ok")->bool_value());
  EXPECT_TRUE(o->Find("x")->is_null());
  EXPECT_EQ(o->GetNumber("event"), std::nullopt);  // a string is not a number
  EXPECT_EQ(o->GetString("missing"), std::nullopt);
}

TEST(Json, RoundTripsThroughTextUnchanged) {
  const std::string text =
      R"({"s":"a\"b\\c\nd","n":-0.5,"i":7,"t":true,"f":false,"z":null,"arr":[1,{"k":[2]}]})";
  Result<JsonObject> once = JsonObject::Parse(text);
  ASSERT_TRUE(once.ok()) << once.status().ToString();
  EXPECT_EQ(once->ToJson(), text);
  Result<JsonObject> twice = JsonObject::Parse(once->ToJson());
  ASSERT_TRUE(twice.ok());
  EXPECT_EQ(twice->ToJson(), text);
}

TEST(Json, KeepsNestedValuesAsCompactRawText) {
  Result<JsonObject> o = JsonObject::Parse(R"({"a": [1, 2] , "b" : {"c": "d", "a": 1}})");
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  EXPECT_EQ(o->Find("a")->type(), JsonValue::Type::kRaw);
  EXPECT_EQ(o->Find("a")->string_value(), "[1,2]");
  EXPECT_EQ(o->Find("b")->string_value(), R"({"c":"d","a":1})");  // keys in their order
}

TEST(Json, ALargeObjectKeepsItsOrderThroughSetsAndErases) {
  JsonObject o;
  for (int i = 0; i < 100; ++i) o.SetInt("k" + std::to_string(i), i);
  o.SetInt("k50", -50);         // replaced in place
  EXPECT_TRUE(o.Erase("k10"));  // the rest move up
  EXPECT_FALSE(o.Erase("k10"));
  o.SetInt("k10", 10);  // back, at the end
  ASSERT_EQ(o.size(), 100u);
  EXPECT_EQ(o.fields()[10].first, "k11");
  EXPECT_EQ(o.fields()[49].first, "k50");
  EXPECT_EQ(o.GetNumber("k50"), -50);
  EXPECT_EQ(o.fields().back().first, "k10");
  EXPECT_EQ(o.GetNumber("k99"), 99);
  EXPECT_EQ(o.Find("k100"), nullptr);
  while (o.size() > 3) o.Erase(o.fields().front().first);  // small again: searched in order
  EXPECT_EQ(o.ToJson(), R"({"k98":98,"k99":99,"k10":10})");
}

TEST(Json, ARepeatedKeyKeepsItsLastValueInItsFirstPlace) {
  Result<JsonObject> o = JsonObject::Parse(R"({"a":1,"b":2,"a":3})");
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  EXPECT_EQ(o->ToJson(), R"({"a":3,"b":2})");
}

TEST(Json, QuotesControlCharactersAndReplacesBytesThatAreNotUtf8) {
  EXPECT_EQ(JsonQuote("a\x01\n\"\xc3\xa9"), "\"a\\u0001\\n\\\"\xc3\xa9\"");
  EXPECT_EQ(JsonQuote("\xff"), "\"\xef\xbf\xbd\"");
  EXPECT_EQ(JsonValue::Int(9007199254740993).ToJson(), "9007199254740993");
}

TEST(Json, DecodesUnicodeEscapes) {
  Result<JsonObject> o = JsonObject::Parse(R"({"s":"\u00e9\ud83d\ude00\/"})");
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  EXPECT_EQ(o->GetString("s"), "\xc3\xa9\xf0\x9f\x98\x80/");
}

TEST(Json, ParsesEmptyObjectAndWhitespace) {
  Result<JsonObject> o = JsonObject::Parse("  { }\n");
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(o->size(), 0u);
}

TEST(Json, RejectsMalformedText) {
  for (const char* bad : {"", "[]", "{", "{\"a\"}", "{\"a\":}", "{\"a\":1,}", "{\"a\":01}",
                          "{\"a\":1.}", "{\"a\":-}", "{\"a\":1e}", "{\"a\":tru}", "{a:1}",
                          "{\"a\":\"x}", "{\"a\":\"\\q\"}", "{\"a\":\"\\ud800\"}", "{\"a\":1} x",
                          "{\"a\":[1,]}", "{\"a\":\"\x01\"}", "{\"a\":1e999}"}) {
    Result<JsonObject> o = JsonObject::Parse(bad);
    EXPECT_FALSE(o.ok()) << "accepted: " << bad;
    if (!o.ok()) {
      EXPECT_EQ(o.status().code(), Status::Code::kInvalidArgument);
    }
  }
}

TEST(Json, ErrorsSayWhereAndWhat) {
  Result<JsonObject> o = JsonObject::Parse(R"({"a":1 "b":2})");
  ASSERT_FALSE(o.ok());
  EXPECT_NE(o.status().message().find("expected '}'"), std::string::npos) << o.status().message();
  EXPECT_NE(o.status().message().find("at byte 10"), std::string::npos) << o.status().message();
}

TEST(Json, RejectsDeepNesting) {
  std::string deep = "{\"a\":" + std::string(100, '[') + std::string(100, ']') + "}";
  EXPECT_FALSE(JsonObject::Parse(deep).ok());
}

}  // namespace
}  // namespace mitra
