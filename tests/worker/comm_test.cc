// Comm: activations and gradients between pipeline stages, matched by tag, with ranks as
// threads (tests/worker/thread_ranks.h).
#include "worker/comm/comm.h"

#include <gtest/gtest.h>

#include <future>

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/torch.h>

#include "rendezvous/store_client.h"
#include "rendezvous/store_server.h"
#include "tests/worker/thread_ranks.h"
#include "worker/comm/job_store.h"

namespace mitra::worker {
namespace {

using testing::RunWithComms;

cutpoint::Activations SomeActivations(double shift) {
  return {{"hidden", torch::arange(12, torch::kFloat32).reshape({3, 4}) + shift},
          {"mask", torch::tensor({1, 0, 1}, torch::kInt64)},
          {"scale", torch::scalar_tensor(shift, torch::kFloat64)}};
}

void ExpectSame(const cutpoint::Activations& got, const cutpoint::Activations& sent) {
  ASSERT_EQ(got.size(), sent.size());
  for (const auto& [name, t] : sent) {
    ASSERT_TRUE(got.count(name)) << name;
    const torch::Tensor& g = got.at(name);
    EXPECT_EQ(g.scalar_type(), t.scalar_type()) << name;
    EXPECT_EQ(g.sizes(), t.sizes()) << name;
    EXPECT_TRUE(torch::equal(g, t)) << name;
  }
}

TEST(Comm, ActivationsArriveWithTheirNamesTypesAndShapes) {
  RunWithComms(2, 1, [](const Placement& p, Comm& comm) {
    if (p.stage() == 0) {
      comm.SendActivations(SomeActivations(0.5), /*dst=*/1, /*tag=*/7);
      comm.WaitSends();
    } else {
      ExpectSame(comm.RecvActivations(/*src=*/0, /*tag=*/7), SomeActivations(0.5));
    }
  });
}

// Sends complete without their receives (they are asynchronous), and a receive takes the
// message of its tag, whatever was sent first: the schedules rely on both.
TEST(Comm, ReceivesMatchTheirTagNotTheOrderOfSending) {
  RunWithComms(2, 1, [](const Placement& p, Comm& comm) {
    if (p.stage() == 0) {
      for (int micro_batch = 0; micro_batch < 3; ++micro_batch) {
        comm.SendActivations(SomeActivations(micro_batch), 1, micro_batch);
      }
      comm.WaitSends();
    } else {
      for (int micro_batch : {2, 0, 1}) {
        SCOPED_TRACE("micro-batch " + std::to_string(micro_batch));
        ExpectSame(comm.RecvActivations(0, micro_batch), SomeActivations(micro_batch));
      }
    }
  });
}

// Gradients go back to the previous stage into tensors whose shapes it already knows; each
// tensor of a message is its own receive.
TEST(Comm, GradientsGoBackIntoTheReceiversTensors) {
  RunWithComms(2, 1, [](const Placement& p, Comm& comm) {
    const std::vector<torch::Tensor> grads = {torch::full({2, 3}, 0.25),
                                              torch::arange(5, torch::kFloat64)};
    if (p.stage() == 1) {
      comm.SendTensors(grads, /*dst=*/0, /*tag=*/3);
      comm.SendTensors({grads[0] * 2, grads[1] * 2}, 0, 4);
      comm.WaitSends();
    } else {
      std::vector<torch::Tensor> into = {torch::empty({2, 3}), torch::empty({5}, torch::kFloat64)};
      const void* where = into[1].data_ptr();
      comm.RecvTensors(into, /*src=*/1, /*tag=*/4, "gradients of micro-batch 4");
      EXPECT_TRUE(torch::equal(into[0], grads[0] * 2));
      EXPECT_TRUE(torch::equal(into[1], grads[1] * 2));
      EXPECT_EQ(into[1].data_ptr(), where) << "received into another tensor";
      comm.RecvTensors(into, 1, 3, "gradients of micro-batch 3");
      EXPECT_TRUE(torch::equal(into[0], grads[0]));
      EXPECT_TRUE(torch::equal(into[1], grads[1]));
    }
  });
}

// A receive posted ahead takes the same messages as one posted at the call: the first message
// on a tag (its header only posted ahead), the next ones into the tensors posted ahead, one
// whose shapes changed (the sender fills what was posted, then sends as without), one with
// another tensor, and one received without posting ahead at all. Each arrives whole.
TEST(Comm, ActivationsPostedAheadArriveWholeWhenTheirShapesChange) {
  const std::vector<cutpoint::Activations> messages = {
      SomeActivations(1),
      SomeActivations(2),
      {{"hidden", torch::arange(6, torch::kFloat32).reshape({2, 3})},
       {"mask", torch::tensor({1, 1}, torch::kInt64)},
       {"scale", torch::scalar_tensor(3.0, torch::kFloat64)}},
      {{"hidden", torch::ones({2, 3})}, {"extra", torch::full({4}, 7.0)}},
      SomeActivations(5),
      SomeActivations(6)};
  RunWithComms(2, 1, [&](const Placement& p, Comm& comm) {
    for (size_t i = 0; i < messages.size(); ++i) {
      SCOPED_TRACE("message " + std::to_string(i));
      if (p.stage() == 0) {
        comm.SendActivations(messages[i], /*dst=*/1, /*tag=*/9);
        comm.WaitSends();
      } else {
        if (i != 4) comm.ExpectActivations(/*src=*/0, /*tag=*/9);
        comm.ExpectActivations(0, 9);  // a second call posts nothing more
        ExpectSame(comm.RecvActivations(0, 9), messages[i]);
      }
    }
  });
}

// A message whose receive was posted ahead leaves its sender before the receiving call is
// made: the sender's WaitSends returns while the receiver is still blocked on a promise the
// sender keeps until then. Posted only at the call, as before, the send would wait for the
// receive and both would time out (the guard: without the Expect calls this test fails). The
// second activation message is the one whose tensors, not only its header, go ahead.
TEST(Comm, MessagesPostedAheadLeaveTheirSenderBeforeTheReceiveIsCalled) {
  std::promise<void> posted, sent;
  std::shared_future<void> posted_f = posted.get_future().share();
  std::shared_future<void> sent_f = sent.get_future().share();
  const std::vector<torch::Tensor> grads = {torch::full({2, 3}, 0.5),
                                            torch::arange(5, torch::kFloat64)};
  RunWithComms(
      2, 1,
      [&](const Placement& p, Comm& comm) {
        if (p.stage() == 0) {
          struct Release {  // set however the sends end, so the receiver never hangs
            std::promise<void>& promise;
            ~Release() { promise.set_value(); }
          } release{sent};
          comm.SendActivations(SomeActivations(1), /*dst=*/1, /*tag=*/4);  // teaches the shapes
          comm.WaitSends();
          posted_f.wait();
          comm.SendActivations(SomeActivations(2), 1, 4);
          comm.SendTensors(grads, 1, /*tag=*/5);
          comm.WaitSends();
          return;
        }
        ExpectSame(comm.RecvActivations(/*src=*/0, 4), SomeActivations(1));
        comm.ExpectActivations(0, 4);
        comm.ExpectTensors({torch::empty({2, 3}), torch::empty({5}, torch::kFloat64)}, 0, 5);
        posted.set_value();
        sent_f.wait();
        ExpectSame(comm.RecvActivations(0, 4), SomeActivations(2));
        const std::vector<torch::Tensor> got = comm.TakeTensors(0, 5, "gradients of micro-batch 5");
        ASSERT_EQ(got.size(), 2u);
        EXPECT_TRUE(torch::equal(got[0], grads[0]));
        EXPECT_TRUE(torch::equal(got[1], grads[1]));
      },
      /*timeout_s=*/3);
}

// The replicas of a stage share a data-parallel group; a job with one replica has none.
TEST(Comm, EachStageHasADataParallelGroupOfItsReplicas) {
  RunWithComms(2, 2, [](const Placement& p, Comm& comm) {
    ASSERT_NE(comm.data_parallel(), nullptr);
    EXPECT_EQ(comm.data_parallel()->getSize(), 2);
    EXPECT_EQ(comm.data_parallel()->getRank(), p.replica());
    EXPECT_EQ(comm.global().getSize(), 4);
    // A sum within the stage only: the two stages add different values.
    std::vector<torch::Tensor> t = {torch::full({1}, 10.0 * p.stage() + p.replica() + 1)};
    comm.Wait(comm.data_parallel()->allreduce(t), "test all-reduce");
    EXPECT_EQ(t[0].item<double>(), 20.0 * p.stage() + 3);
    EXPECT_EQ(comm.Describe(3), "rank 3 (stage 1, replica 1)");
  });
  RunWithComms(2, 1, [](const Placement&, Comm& comm) {
    EXPECT_EQ(comm.data_parallel(), nullptr);
  });
}

// Every connection of a job's groups is proven with the job token before it carries anything
// (Comm::ProvePairs). The guard: a rank that got into the store but holds another token (as a
// process that took a pair's place would) fails the proof, and so does its peer.
TEST(Comm, AConnectionWhoseTagIsNotTheJobsEndsTheRendezvousNamingIt) {
  const auto token = rendezvous::JobToken::Generate(), other = rendezvous::JobToken::Generate();
  auto server = rendezvous::StoreServer::Start(token, "127.0.0.1", 0);
  ASSERT_TRUE(server.ok()) << server.status().message();
  const int port = (*server)->port();
  for (const bool outsider : {false, true}) {
    SCOPED_TRACE(outsider ? "rank 1 holds another token" : "both hold the job's token");
    std::vector<std::string> errors(2);
    testing::RunRanks(2, [&](int rank) {
      auto client = rendezvous::StoreClient::Connect(token, "127.0.0.1", port, 10);
      ASSERT_TRUE(client.ok()) << client.status().message();
      const rendezvous::JobToken& held = rank == 1 && outsider ? other : token;
      auto store = c10::make_intrusive<JobStore>(held, nullptr, std::move(client).value(),
                                                 std::chrono::seconds(10));
      const Placement p = testing::LoopbackPlacement(2, 1, rank, port, 10);
      try {
        auto prefixed = c10::make_intrusive<c10d::PrefixStore>(
            std::string(outsider ? "outsider" : "own"), store);
        auto comm = Comm::Join(p, prefixed, Backend::kGloo);
        comm->SendTensors({torch::ones({2})}, 1 - rank, 1);
        std::vector<torch::Tensor> into{torch::zeros({2})};
        comm->RecvTensors(into, 1 - rank, 1, "ones");
        comm->WaitSends();
        EXPECT_TRUE(torch::equal(into[0], torch::ones({2})));
      } catch (const PeerError& e) {
        errors[rank] = e.what();
      }
    });
    for (int rank = 0; rank < 2; ++rank) {
      if (!outsider) {
        EXPECT_EQ(errors[rank], "") << "rank " << rank;
      } else {
        EXPECT_NE(errors[rank].find("did not prove the job token"), std::string::npos)
            << "rank " << rank << ": " << errors[rank];
      }
    }
  }
}

// A peer that never sends: the receive gives up after the placement's timeout with a PeerError
// that names what was awaited and from whom.
TEST(Comm, APeerThatNeverSendsIsAPeerErrorNamingIt) {
  std::promise<void> received;
  std::shared_future<void> done = received.get_future().share();
  RunWithComms(
      2, 1,
      [&](const Placement& p, Comm& comm) {
        if (p.stage() == 0) {
          done.wait();  // alive, silent, until the receive has given up
          return;
        }
        struct Release {
          std::promise<void>& promise;
          ~Release() { promise.set_value(); }
        } release{received};
        try {
          comm.RecvActivations(0, 1);
          ADD_FAILURE() << "a receive from a silent peer returned";
        } catch (const PeerError& e) {
          EXPECT_NE(std::string(e.what()).find(
                        "receiving activations from rank 0 (stage 0, replica 0) failed"),
                    std::string::npos)
              << e.what();
        }
      },
      /*timeout_s=*/1);
}

}  // namespace
}  // namespace mitra::worker
