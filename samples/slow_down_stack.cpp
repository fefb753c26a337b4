// slow_down_stack: the stacked brief in virtual time. A slow_down (three requests per 10 s at full
// speed, then (hit - 3)^2 seconds, at most 20 s) in front of a hard limit of 7 per 30 s, both per
// client. One client sends seven requests at once, an eighth at 12 s and a ninth at 31 s.
//
// Prints one line per request: arrival, slow_down hit, delay, the limiter's verdict, when the
// answer went out, and the response headers. Request 7 shows the "request 7" effect: it arrived
// within the limit, waited 16 s, and was refused, because request 8 reached the limiter first.
#include <fmt/format.h>

#include <cstdio>
#include <memory>
#include <rc/rc.hpp>
#include <string>
#include <vector>

using namespace std::chrono_literals;

namespace {

struct request {
  rc::duration at;
  std::string client;
};

struct answer {
  rc::duration arrived{}, answered{};
  rc::outcome::kind how{};
  std::vector<rc::limit_note> notes;
  std::optional<rc::error> failure;
};

// Emits each request at its time with an "x-client" header and records how its run ended.
class scripted final : public rc::source<int> {
 public:
  scripted(std::vector<request> script, std::shared_ptr<std::vector<answer>> answers)
      : script_(std::move(script)), answers_(std::move(answers)) {
    answers_->resize(script_.size());
  }
  std::string_view adapter() const override { return "scripted"; }

  rc::task<void> run(rc::source_context& sc) override {
    for (std::size_t i = 0; i < script_.size(); ++i) {
      if (co_await sc.sleep_until(rc::time_point{} + script_[i].at) == rc::wait_result::cancelled) co_return;
      rc::exchange ex = sc.make(static_cast<int>(i + 1));
      ex.set_header("x-client", script_[i].client);
      rc::spawn([rt = &sc.route(), out = &(*answers_)[i], ex = std::move(ex)]() mutable -> rc::task<void> {
        out->arrived = rt->now().time_since_epoch();
        rc::run_result r = co_await rt->process(std::move(ex));
        out->answered = rt->now().time_since_epoch();
        out->how = r.result.what;
        out->notes = r.ex.limit_notes();
        if (r.result.is_fail()) out->failure = rc::to_error(r.result.error);
      });
    }
  }

 private:
  std::vector<request> script_;
  std::shared_ptr<std::vector<answer>> answers_;
};

double secs(rc::duration d) { return std::chrono::duration<double>(d).count(); }

const rc::limit_note* note_of(const answer& a, std::string_view gate) {
  for (const auto& n : a.notes)
    if (n.gate == gate) return &n;
  return nullptr;
}

}  // namespace

int main() {
  rc::context ctx(rc::virtual_time);
  auto answers = std::make_shared<std::vector<answer>>();
  std::vector<request> script(7, request{0s, "a"});
  script.push_back({12s, "a"});
  script.push_back({31s, "a"});

  ctx.add(rc::craft()
              .id("api")
              .from(scripted(script, answers))
              .slow_down({.window = 10s,
                          .delay_after = 3,
                          .delay =
                              [](std::uint64_t hits) {
                                auto n = hits - 3;
                                return n * n * 1s;
                              },
                          .max_delay = 20s,
                          .key = rc::by_header("x-client")})
              .rate_limit({.limit = 7,
                           .window = 30s,
                           .headers = rc::rate_limit_headers::draft_6,
                           .message = "Too many requests",
                           .key = rc::by_header("x-client")})
              .to([](int&) {}));
  ctx.start();
  ctx.drain();
  ctx.stop();

  fmt::print(
      "slow_down {{10 s window, delay_after 3, (hit - 3)^2 s, max 20 s}} -> rate_limit {{7 per 30 s, "
      "draft-6}}, per client, virtual time\n");
  fmt::print("{:>3}  {:>7}  {:>3}  {:>6}  {:<22}  {:>8}  {}\n", "req", "arrival", "hit", "delay", "limiter", "answered",
             "headers");
  int refused_after_wait = 0;
  std::string effect = "none";
  for (std::size_t i = 0; i < answers->size(); ++i) {
    const answer& a = (*answers)[i];
    const auto* slow = note_of(a, "slowDown");
    const auto* limit = note_of(a, "rateLimit");
    std::string verdict = "-";
    if (limit)
      verdict = limit->rejected
                    ? fmt::format("{} refused (hit {})", a.failure->details()["status"].get<int>(), limit->used)
                    : fmt::format("passed (hit {}, {} left)", limit->used, limit->remaining);
    std::string headers;
    if (limit)
      for (const auto& [name, value] : rc::rate_limit_headers_of(*limit))
        headers += fmt::format("{}{}: {}", headers.empty() ? "" : " | ", name, value);
    fmt::print("{:>3}  {:>5.1f} s  {:>3}  {:>4.1f} s  {:<22}  {:>6.1f} s  {}\n", i + 1, secs(a.arrived),
               slow ? slow->used : 0, slow ? secs(slow->delay) : 0.0, verdict, secs(a.answered), headers);
    if (slow && limit && limit->rejected && slow->delay > rc::duration::zero() && slow->used <= limit->limit) {
      ++refused_after_wait;
      effect = fmt::format(
          "request {} arrived at {:.1f} s as slow_down hit {} (within the limit of {}), waited {:.1f} s "
          "and was refused as the limiter's hit {} (Retry-After {})",
          i + 1, secs(a.arrived), slow->used, limit->limit, secs(slow->delay), limit->used,
          a.failure->details()["retry_after"].get<long long>());
    }
  }
  fmt::print("result: {}\n", effect);
  std::fflush(stdout);
  return refused_after_wait == 1 ? 0 : 1;
}
