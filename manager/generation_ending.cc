#include "manager/generation_ending.h"

#include <utility>

namespace mitra::manager {

void GenerationEnding::Begin(Kind kind, const char* name, double now) {
  kind_ = kind;
  change_ = Change{name, now, now};
}

void GenerationEnding::EndJob(FinishAction end) {
  kind_ = Kind::kJobEnd;
  end_ = std::move(end);
}

void GenerationEnding::FailJob(const std::string& reason) {
  if (!end_) end_ = FinishAction{FinishAction::Outcome::kFailed, reason};
}

void GenerationEnding::RanksExited(double now) {
  if (change_) change_->ranks_exited = now;
}

std::optional<FinishAction> GenerationEnding::Outcome() const {
  if (end_) return end_;
  switch (kind_) {
    case Kind::kNone:
      return FinishAction{FinishAction::Outcome::kDone, ""};
    case Kind::kStop:
      return FinishAction{FinishAction::Outcome::kStopped, ""};
    case Kind::kJobEnd:  // EndJob always says how
      return FinishAction{FinishAction::Outcome::kFailed, ""};
    case Kind::kMorph:
    case Kind::kRecovery:
      break;
  }
  return std::nullopt;
}

std::optional<GenerationEnding::Change> GenerationEnding::TakeChange() {
  return std::exchange(change_, std::nullopt);
}

}  // namespace mitra::manager
