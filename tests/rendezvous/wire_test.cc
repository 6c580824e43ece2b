// The rendezvous store's protocol without sockets: the token, the handshake's proofs, frames
// and their tags, requests and responses.
#include <gtest/gtest.h>

#include <string>

#include "rendezvous/job_token.h"
#include "rendezvous/wire.h"

namespace mitra::rendezvous {
namespace {

std::string Hex(const Bytes32& bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string hex;
  for (uint8_t b : bytes) hex += std::string{kDigits[b >> 4], kDigits[b & 15]};
  return hex;
}

TEST(JobToken, ATokenSpelledInHexReadsBackAndTwoNewOnesDiffer) {
  const JobToken a = JobToken::Generate(), b = JobToken::Generate();
  EXPECT_NE(a.Hex(), b.Hex());
  ASSERT_EQ(a.Hex().size(), 64u);
  Result<JobToken> back = JobToken::Parse(a.Hex());
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->Hex(), a.Hex());
}

TEST(JobToken, TextThatIsNotSixtyFourHexDigitsIsRefusedWithoutBeingQuoted) {
  for (const std::string& text : {std::string(), std::string(63, 'a'), std::string(65, 'a'),
                                 std::string(63, 'a') + "g"}) {
    Result<JobToken> parsed = JobToken::Parse(text);
    ASSERT_FALSE(parsed.ok()) << text;
    EXPECT_EQ(parsed.status().message().find(text.empty() ? "\x01" : text), std::string::npos);
  }
}

// The tag of "Hi There" under 32 bytes of 0x0b, as OpenSSL's command line prints it:
// printf 'Hi There' | openssl dgst -sha256 -mac HMAC -macopt hexkey:0b0b...0b (64 digits).
TEST(Hmac, MatchesOpenSslsCommandLine) {
  Bytes32 key;
  key.fill(0x0b);
  EXPECT_EQ(Hex(Hmac(key, {"Hi ", "There"})),
            "198a607eb44bfbc69903a0f1cf2bbdc5ba0aa3f3d9ae3c1c7a3b1696a0b68cf7");
}

TEST(Handshake, OnlyTheHolderOfTheTokenProvesItAndOnlyTheServerHoldingItAnswers) {
  const JobToken token = JobToken::Generate(), other = JobToken::Generate();
  const Bytes32 server_nonce = RandomBytes32(), client_nonce = RandomBytes32();
  Result<Bytes32> hello = ReadHello(Hello(server_nonce));
  ASSERT_TRUE(hello.ok());
  EXPECT_EQ(*hello, server_nonce);

  Result<Bytes32> proven = CheckProof(token, server_nonce, Proof(token, server_nonce, client_nonce));
  ASSERT_TRUE(proven.ok());
  EXPECT_EQ(*proven, client_nonce);
  EXPECT_FALSE(CheckProof(token, server_nonce, Proof(other, server_nonce, client_nonce)).ok());
  // A proof made for another connection's nonce (a replay) fails.
  EXPECT_FALSE(CheckProof(token, RandomBytes32(), Proof(token, server_nonce, client_nonce)).ok());
  EXPECT_FALSE(CheckProof(token, server_nonce, "short").ok());

  EXPECT_TRUE(CheckAnswer(token, server_nonce, client_nonce, Answer(token, server_nonce, client_nonce)));
  EXPECT_FALSE(CheckAnswer(token, server_nonce, client_nonce, Answer(other, server_nonce, client_nonce)));
  EXPECT_FALSE(ReadHello("HTTP/1.1 200 OK\r\n\r\n").ok());
}

struct Pair {
  Channel server, client;
};

Pair Connected(const JobToken& token) {
  const Bytes32 s = RandomBytes32(), c = RandomBytes32();
  return {Channel(token, s, c, Channel::Side::kServer), Channel(token, s, c, Channel::Side::kClient)};
}

TEST(Channel, FramesArriveInOrderWhateverPiecesTheBytesComeIn) {
  Pair p = Connected(JobToken::Generate());
  std::string bytes = p.client.Seal("one");  // one statement each: sealing numbers the frames
  bytes += p.client.Seal("");
  bytes += p.client.Seal("three");
  for (char b : bytes) p.server.Feed(std::string(1, b));
  for (const char* expected : {"one", "", "three"}) {
    auto body = p.server.Next();
    ASSERT_TRUE(body.has_value());
    ASSERT_TRUE(body->ok()) << body->status().message();
    EXPECT_EQ(**body, expected);
  }
  EXPECT_FALSE(p.server.Next().has_value());
  EXPECT_EQ(p.server.buffered(), 0u);
}

TEST(Channel, AnAlteredReplayedOrReflectedFrameBreaksTheConnection) {
  const JobToken token = JobToken::Generate();
  {
    Pair p = Connected(token);
    std::string frame = p.client.Seal("set x");
    frame[5] ^= 1;
    p.server.Feed(frame);
    auto body = p.server.Next();
    ASSERT_TRUE(body.has_value());
    EXPECT_FALSE(body->ok());
    EXPECT_FALSE(p.server.Next()->ok());  // and stays broken
  }
  {
    Pair p = Connected(token);
    const std::string frame = p.client.Seal("add x 1");
    p.server.Feed(frame + frame);
    EXPECT_TRUE(p.server.Next()->ok());
    EXPECT_FALSE(p.server.Next()->ok());  // the same frame again
  }
  {
    Pair p = Connected(token);
    p.client.Feed(p.client.Seal("a client's frame sent back to it"));
    EXPECT_FALSE(p.client.Next()->ok());
  }
}

TEST(Channel, ALengthOverTheLimitIsRefusedAtItsHeader) {
  Pair p = Connected(JobToken::Generate());
  p.server.Feed(std::string("\x7f\xff\xff\xff", 4) + std::string(100, 'x'));
  auto body = p.server.Next();
  ASSERT_TRUE(body.has_value());
  ASSERT_FALSE(body->ok());
  EXPECT_NE(body->status().message().find("over the limit"), std::string::npos);
}

TEST(Requests, EveryFieldSurvivesEncodingAndMalformedBodiesAreNamed) {
  const Request r{Op::kCompareSet, -7, {"gen-1/key"}, std::string("v\0v", 3), "old"};
  Result<Request> back = DecodeRequest(Encode(r));
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->op, r.op);
  EXPECT_EQ(back->number, r.number);
  EXPECT_EQ(back->keys, r.keys);
  EXPECT_EQ(back->value, r.value);
  EXPECT_EQ(back->expected, r.expected);

  const std::string body = Encode(r);
  EXPECT_FALSE(DecodeRequest(body.substr(0, body.size() - 1)).ok());
  EXPECT_FALSE(DecodeRequest(body + "x").ok());
  EXPECT_FALSE(DecodeRequest(std::string(1, '\x09') + body.substr(1)).ok());
  EXPECT_FALSE(DecodeRequest(Encode(Request{Op::kSet, 0, {}, "v", ""})).ok());  // no key
  EXPECT_FALSE(DecodeRequest(Encode(Request{Op::kGet, 0, {"a", "b"}, "", ""})).ok());
  EXPECT_TRUE(DecodeRequest(Encode(Request{Op::kWait, 0, {"a", "b"}, "", ""})).ok());

  const Response response{Reply::kValue, 42, "value"};
  Result<Response> answer = DecodeResponse(Encode(response));
  ASSERT_TRUE(answer.ok());
  EXPECT_EQ(answer->reply, Reply::kValue);
  EXPECT_EQ(answer->number, 42);
  EXPECT_EQ(answer->value, "value");
  EXPECT_FALSE(DecodeResponse("").ok());
}

}  // namespace
}  // namespace mitra::rendezvous
