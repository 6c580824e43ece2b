// What reaches the rendezvous store from the network (rendezvous/wire.h): the bytes of a
// connection, read as the server reads them, and a frame's body, decoded as a request.
//
// The input's first byte picks the part (its value modulo 3): 0, the bytes are fed to the
// server's side of a proven channel, in pieces whose sizes the next bytes choose (a fuzzer
// cannot forge a tag, so this reaches the length checks and the tag's refusal); 1, the rest is
// a body decoded as a request and as a response, and sealed and opened between two channels of
// one session; 2, the rest is what a connection sends before it is admitted, read as a
// server's hello and checked as a proof of the job token.
//
// Invariants: a channel never yields a body over kMaxBody, holds less than a whole frame once
// it has yielded what it could, and once it refuses a frame it refuses every call after; a decoded request or response encodes
// to the same body; a sealed body opens to itself on the other side; a hello is read only from
// its exact size and header; a proof is accepted only when it is the one the token makes for
// the nonce it names.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "fuzz/fuzz_check.h"
#include "rendezvous/wire.h"

namespace mitra::rendezvous {
namespace {

JobToken FixedToken() { return *JobToken::Parse(std::string(64, '7')); }

Bytes32 Nonce(uint8_t fill) {
  Bytes32 n;
  n.fill(fill);
  return n;
}

void FeedServer(std::string_view input) {
  Channel server(FixedToken(), Nonce(1), Nonce(2), Channel::Side::kServer);
  size_t fed = 0;
  bool broken = false;
  while (!input.empty()) {
    const size_t piece = std::min<size_t>(1 + static_cast<uint8_t>(input[0]), input.size());
    server.Feed(input.substr(0, piece));
    fed += piece;
    input.remove_prefix(piece);
    while (auto body = server.Next()) {
      if (!body->ok()) {
        broken = true;
        break;
      }
      FUZZ_CHECK(!broken);
      FUZZ_CHECK(body->value().size() <= kMaxBody);
    }
    if (broken) {
      FUZZ_CHECK(server.Next().has_value() && !server.Next()->ok());
    } else {
      // What is left is less than a whole frame: every complete one was yielded.
      FUZZ_CHECK(server.buffered() < kFrameHeaderBytes + kMaxBody + kTagBytes);
      FUZZ_CHECK(server.buffered() <= fed);
    }
  }
}

void Decode(std::string_view body) {
  if (Result<Request> request = DecodeRequest(body); request.ok()) {
    FUZZ_CHECK(Encode(*request) == body);
    FUZZ_CHECK(!OpName(request->op).empty());
  }
  if (Result<Response> response = DecodeResponse(body); response.ok()) {
    FUZZ_CHECK(Encode(*response) == body);
  }
  Channel client(FixedToken(), Nonce(1), Nonce(2), Channel::Side::kClient);
  Channel server(FixedToken(), Nonce(1), Nonce(2), Channel::Side::kServer);
  server.Feed(client.Seal(body));
  auto opened = server.Next();
  FUZZ_CHECK(opened.has_value() && opened->ok() && opened->value() == body);
  FUZZ_CHECK(server.buffered() == 0);
}

void Admit(std::string_view bytes) {
  if (Result<Bytes32> nonce = ReadHello(bytes); nonce.ok()) {
    FUZZ_CHECK(bytes.size() == kHelloBytes);
    FUZZ_CHECK(Hello(*nonce) == bytes);
  }
  const JobToken token = FixedToken();
  if (Result<Bytes32> client_nonce = CheckProof(token, Nonce(1), bytes); client_nonce.ok()) {
    FUZZ_CHECK(Proof(token, Nonce(1), *client_nonce) == bytes);
  }
}

}  // namespace
}  // namespace mitra::rendezvous

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view input(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 3) {
    case 0:
      mitra::rendezvous::FeedServer(input);
      break;
    case 1:
      if (input.size() <= mitra::rendezvous::kMaxBody) mitra::rendezvous::Decode(input);
      break;
    default:
      mitra::rendezvous::Admit(input);
  }
  return 0;
}
