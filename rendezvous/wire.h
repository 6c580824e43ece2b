// The rendezvous store's protocol (docs/security.md): what a job's processes send each other
// over TCP, written and read in one place. Nothing here does I/O: the server (store_server.h)
// and the client (store_client.h) move the bytes.
//
// A connection begins with a handshake in which each side proves it holds the job token
// without sending it (fixed sizes, so nothing is parsed before the proof):
//   server -> client   hello:  magic (8 bytes) + version (1) + server nonce (32)
//   client -> server   proof:  magic + version + client nonce (32)
//                               + HMAC(token, "client" + server nonce + client nonce)
//   server -> client   answer: HMAC(token, "server" + server nonce + client nonce)
// A client whose proof is wrong gets no answer: the server closes the connection. The client
// checks the answer too, so a process that took the store's port first learns nothing and is
// not believed.
//
// Then frames, each: body length (4 bytes, big-endian, at most kMaxBody, checked before
// anything is allocated) + body + HMAC(session key, direction + sequence number + body), the
// session key being HMAC(token, "session" + both nonces). A frame altered, replayed or sent by
// another connection fails its tag, and the connection is closed. Bodies are not encrypted:
// what a job keeps in its store (Gloo's addresses, checkpoint votes) is not secret, only who
// may write it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "mitra/common/status.h"
#include "rendezvous/job_token.h"

namespace mitra::rendezvous {

inline constexpr std::string_view kMagic = "mitrardz";
inline constexpr uint8_t kVersion = 1;
inline constexpr size_t kHelloBytes = 8 + 1 + 32;
inline constexpr size_t kProofBytes = 8 + 1 + 32 + 32;
inline constexpr size_t kAnswerBytes = 32;
inline constexpr size_t kFrameHeaderBytes = 4;
inline constexpr size_t kTagBytes = 32;
// The largest body: a request with its keys and values, or a response. Gloo's addresses are
// about 100 bytes; nothing mitra stores comes near this.
inline constexpr size_t kMaxBody = 1 << 20;
inline constexpr size_t kMaxKeysPerRequest = 4096;

// ---- Handshake ---------------------------------------------------------------------------

std::string Hello(const Bytes32& server_nonce);
// The server nonce of a hello; InvalidArgument when it is not a mitra store's hello.
Result<Bytes32> ReadHello(std::string_view hello);
std::string Proof(const JobToken& token, const Bytes32& server_nonce, const Bytes32& client_nonce);
// The client nonce of a proof that is right for `token`; InvalidArgument otherwise.
Result<Bytes32> CheckProof(const JobToken& token, const Bytes32& server_nonce,
                           std::string_view proof);
std::string Answer(const JobToken& token, const Bytes32& server_nonce, const Bytes32& client_nonce);
bool CheckAnswer(const JobToken& token, const Bytes32& server_nonce, const Bytes32& client_nonce,
                 std::string_view answer);

// ---- Frames --------------------------------------------------------------------------------

// One side of a proven connection: seals the frames it sends and opens those it receives,
// each direction numbered from 0.
class Channel {
 public:
  enum class Side { kServer, kClient };
  Channel(const JobToken& token, const Bytes32& server_nonce, const Bytes32& client_nonce,
          Side side);

  // The frame that carries `body` (at most kMaxBody bytes).
  std::string Seal(std::string_view body);

  // Takes received bytes; Next() then yields the bodies of the complete frames among them.
  void Feed(std::string_view bytes);
  // The next complete frame's body; nullopt when none is complete yet; InvalidArgument (and
  // every call after) when the bytes are not a frame of this connection: a length over kMaxBody
  // or a wrong tag.
  std::optional<Result<std::string>> Next();
  // Bytes received and not yet yielded as a body.
  size_t buffered() const { return buffer_.size() - read_; }

 private:
  Bytes32 Tag(char direction, uint64_t sequence, std::string_view body) const;

  Bytes32 session_key_;
  char send_direction_, receive_direction_;
  uint64_t sent_ = 0, received_ = 0;
  std::string buffer_;
  size_t read_ = 0;
  std::optional<Status> broken_;
};

// ---- Requests and responses ------------------------------------------------------------

// What c10d::Store asks (worker/comm/job_store.h maps each call to one of these).
enum class Op : uint8_t {
  kSet = 1,         // keys[0] = value
  kGet = 2,         // keys[0]'s value, or kNotFound
  kAdd = 3,         // keys[0] += number (a missing key counts as 0); the sum
  kCompareSet = 4,  // keys[0] = value if its value is `expected` (or it is missing and
                    // `expected` is empty); the value it then has
  kDelete = 5,      // whether keys[0] existed
  kCheck = 6,       // whether every key exists (number 1 or 0)
  kNumKeys = 7,     // how many keys the store holds
  kWait = 8,        // answers once every key exists (kOk), or after `number` ms (kTimedOut;
                    // `number` <= 0: no time limit)
};

struct Request {
  Op op = Op::kGet;
  int64_t number = 0;
  std::vector<std::string> keys;
  std::string value;
  std::string expected;
};

enum class Reply : uint8_t { kOk = 1, kValue = 2, kNumber = 3, kNotFound = 4, kTimedOut = 5, kError = 6 };

struct Response {
  Reply reply = Reply::kOk;
  int64_t number = 0;
  std::string value;  // kValue's value, kError's message
};

std::string Encode(const Request& request);
// InvalidArgument, saying what is wrong, for a body that is not a whole request: an unknown
// op, a length past the end, bytes left over, more than kMaxKeysPerRequest keys, or keys the
// op does not take.
Result<Request> DecodeRequest(std::string_view body);
std::string Encode(const Response& response);
Result<Response> DecodeResponse(std::string_view body);

// "set", "get", ...: for messages.
std::string_view OpName(Op op);

}  // namespace mitra::rendezvous
