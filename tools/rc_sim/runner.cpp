#include "runner.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <map>
#include <memory>
#include <queue>
#include <random>
#include <rc/event_details.hpp>
#include <rc/http_rate_limit_headers.hpp>
#include <rc/rc.hpp>
#include <regex>
#include <set>
#include <tuple>
#include <unordered_map>

namespace rc::sim {

std::string_view to_string(gate_outcome o) noexcept {
  switch (o) {
    case gate_outcome::passed:
      return "passed";
    case gate_outcome::delayed:
      return "delayed";
    case gate_outcome::rejected:
      return "rejected";
    case gate_outcome::abandoned:
      return "abandoned";
    case gate_outcome::retried:
      return "retried";
    case gate_outcome::exhausted:
      return "exhausted";
    case gate_outcome::stopped:
      return "stopped";
    case gate_outcome::served:
      return "served";
    case gate_outcome::failed:
      return "failed";
  }
  return "?";
}

std::string_view to_string(request_outcome o) noexcept {
  switch (o) {
    case request_outcome::served:
      return "served";
    case request_outcome::refused:
      return "refused";
    case request_outcome::abandoned:
      return "abandoned";
    case request_outcome::failed:
      return "failed";
  }
  return "?";
}

duration request_result::total_wait() const noexcept {
  duration total{};
  for (const auto& p : passes)
    if (p.gate != service_gate) total += p.wait;
  return total;
}

namespace {

template <class... F>
struct overloaded : F... {
  using F::operator()...;
};
template <class... F>
overloaded(F...) -> overloaded<F...>;  // clang before 17 deduces no aggregate (the fuzz build is clang 14)

/// The order a request meets the gates: route gates (list order), the route retry segment, then
/// the step gates (list order, first listed outermost). The service comes last.
std::vector<std::uint16_t> chain_of(const scenario& s) {
  std::vector<std::uint16_t> chain;
  for (std::size_t i = 0; i < s.gates.size(); ++i)
    if (s.gates[i].scope == rc::scope::route && s.gates[i].kind != gate_kind::retry) chain.push_back(std::uint16_t(i));
  for (std::size_t i = 0; i < s.gates.size(); ++i)
    if (s.gates[i].scope == rc::scope::route && s.gates[i].kind == gate_kind::retry) chain.push_back(std::uint16_t(i));
  for (std::size_t i = 0; i < s.gates.size(); ++i)
    if (s.gates[i].scope == rc::scope::step) chain.push_back(std::uint16_t(i));
  return chain;
}

/// RC5003 "<op>({ <option> }) must be <rule>, got <value>." becomes
/// The kind a gate's events and gateId name it by.
std::string_view event_kind(gate_kind k) noexcept {
  switch (k) {
    case gate_kind::throttle:
      return "throttle";
    case gate_kind::slow_down:
      return "slowDown";
    case gate_kind::rate_limit:
      return "rateLimit";
    case gate_kind::retry:
      return "retry";
    case gate_kind::delay:
      return "delay";
  }
  return "wrapper";
}

/// "gates[i].<json option>: must be <rule>, got <value>".
scenario_error at_path(const gate_spec& g, const rc::error& e) {
  static const std::regex shape(R"(^\w+\(\{ (\w+) \}\) ([\s\S]*?)\.?$)");
  std::smatch m;
  const std::string& message = e.message();
  if (std::regex_match(message, m, shape)) {
    std::string option = m[1].str();
    static const std::set<std::string> in_ms = {"window", "delay", "max_delay", "max_wait", "backoff", "max_backoff"};
    if (in_ms.count(option)) option += "_ms";
    return {g.path + "." + option, m[2].str()};
  }
  if (e.code() == errc::invalid_dsl && g.kind == gate_kind::delay) return {g.path + ".scope", message};
  return {g.path, message};
}

/// The one place scenario gates become engine gates: the DSL, as a user writes it.
template <class Builder>
void add_gate(Builder& b, const gate_spec& g, std::uint64_t seed, std::size_t index) {
  try {
    std::visit(overloaded{
                   [&](const throttle_options& o) { (void)std::move(b).throttle(o); },
                   [&](const slow_down_options& o) { (void)std::move(b).slow_down(o); },
                   [&](const rate_limit_options& o) { (void)std::move(b).rate_limit(o); },
                   [&](const delay_options& o) { (void)std::move(b).delay(o.delay); },
                   [&](const retry_options& o) {
                     retry_options seeded = o;
                     // Jitter from a seeded engine, turned into [0, 1) by hand: the standard's
                     // distributions differ between libraries, mt19937_64's output does not.
                     auto engine = std::make_shared<std::mt19937_64>(seed * 1000003ULL + index);
                     seeded.random = [engine] { return static_cast<double>((*engine)() >> 11) * 0x1.0p-53; };
                     (void)std::move(b).retry(std::move(seeded));
                   },
               },
               g.options);
  } catch (const rc::error& e) {
    throw at_path(g, e);
  }
}

void check_retries(const scenario& s) {
  // A route has one retry segment: the DSL would replace the first route-scope retry.
  const gate_spec* first = nullptr;
  for (const auto& g : s.gates) {
    if (g.kind != gate_kind::retry || g.scope != rc::scope::route) continue;
    if (first)
      throw scenario_error(g.path, fmt::format("a second route-scope retry (after {}): a route has one retry "
                                               "segment; the second would replace the first",
                                               first->path));
    first = &g;
  }
}

/// The gateId the route gives each scenario gate: "<kind>#<n>", the n-th of its kind in the order
/// build_route declares them (route scope in list order, then step scope in list order).
std::map<std::string, std::uint16_t, std::less<>> gate_ids_of(const scenario& s) {
  std::map<std::string, std::uint16_t, std::less<>> ids;
  std::map<std::string_view, int> counts;
  for (const rc::scope sc : {rc::scope::route, rc::scope::step})
    for (std::size_t i = 0; i < s.gates.size(); ++i) {
      if (s.gates[i].scope != sc) continue;
      const std::string_view kind = event_kind(s.gates[i].kind);
      ids.emplace(fmt::format("{}#{}", kind, ++counts[kind]), std::uint16_t(i));
    }
  return ids;
}

template <class Source>
route_definition build_route(const scenario& s, Source source, std::unique_ptr<rc::step> service) {
  check_retries(s);
  auto b = rc::craft().id("rc-sim");
  for (std::size_t i = 0; i < s.gates.size(); ++i)
    if (s.gates[i].scope == rc::scope::route) add_gate(b, s.gates[i], s.seed, i);
  auto r = std::move(b).from(std::move(source));
  for (std::size_t i = 0; i < s.gates.size(); ++i)
    if (s.gates[i].scope == rc::scope::step) add_gate(r, s.gates[i], s.seed, i);
  try {
    return std::move(r).use(std::move(service)).build();
  } catch (const rc::error& e) {
    throw scenario_error("gates", e.message());
  }
}

// ---------------------------------------------------------------------------------------------
// Recording: what the events, the notes and the final error say about each request.

struct live_state {
  bool open = false;
  std::uint16_t open_gate = 0;
  std::uint32_t open_pass = 0;
  time_point open_from{};
  std::uint32_t service_attempts = 0;
};

class recorder {
 public:
  recorder(const scenario& s, run_report& rep, const run_options& o)
      : s_(s),
        rep_(rep),
        keep_(o.keep_requests),
        on_finished_(o.on_finished),
        ids_(gate_ids_of(s)),
        position_(s.gates.size(), -1),
        entry_key_(s.traffic.size(), unset) {
    rep_.chain = chain_of(s);
    rep_.request_count = s.request_count();
    if (keep_) {
      rep_.requests.resize(s.request_count());
      live_.resize(s.request_count());
    }
    for (std::size_t p = 0; p < rep_.chain.size(); ++p) position_[rep_.chain[p]] = int(p);
  }

  void arrived(std::uint32_t id, std::uint32_t traffic, const std::string& key, time_point at) {
    if (!keep_) open_.try_emplace(id);
    auto& r = req(id);
    r.id = id;
    r.traffic = traffic;
    // Keys numbered in order of first arrival; a traffic entry has one key, so look it up once.
    if (entry_key_[traffic] == unset) {
      auto [it, fresh] = key_index_.try_emplace(key, std::uint32_t(rep_.keys.size()));
      if (fresh) rep_.keys.push_back(key);
      entry_key_[traffic] = it->second;
    }
    r.key = entry_key_[traffic];
    r.arrival = at;
    r.passes.reserve(rep_.chain.size() + 1);  // the usual life: each gate once, then the service
  }

  std::uint32_t fail_first(std::uint32_t id) const { return s_.traffic[req(id).traffic].fail_first; }

  void on_event(const rc::event& e) {
    // The rate gates' events carry typed details: read without rendering any JSON (a million
    // requests make several million of them). The others (retry, delay) are read as JSON.
    const rc::gate_event* typed = e.get<rc::gate_event>();
    const nlohmann::json* json = typed ? nullptr : &e.details.json();
    std::uint32_t id = 0;
    if (typed) {
      // The request's id is the exchange's body (launch sets it, and the correlation id from it).
      if (!typed->ex->raw_body().holds<std::uint32_t>()) return;
      id = typed->ex->body<std::uint32_t>();
    } else {
      const auto cid = json->find("correlationId");
      if (cid == json->end() || !cid->is_string()) return;
      const std::string& text = cid->get_ref<const std::string&>();
      if (std::from_chars(text.data(), text.data() + text.size(), id).ec != std::errc()) return;
    }
    if (id == 0 || id > rep_.request_count) return;
    // Which gate: its gateId, which the route gave it in declaration order (gate_ids_of).
    std::optional<std::uint16_t> gate;
    if (typed) {
      gate = gate_of(*typed);
    } else {
      const auto gid = json->find("gateId");
      if (gid == json->end() || !gid->is_string()) return;
      const auto g_it = ids_.find(gid->get_ref<const std::string&>());
      if (g_it != ids_.end()) gate = g_it->second;
    }
    if (!gate) return;
    const std::uint16_t g = *gate;
    request_result* rp = nullptr;
    live_state* lp = nullptr;
    if (keep_) {
      rp = &rep_.requests[id - 1];
      lp = &live_[id - 1];
    } else {
      const auto it = open_.find(id);
      if (it == open_.end()) return;
      rp = &it->second.r;
      lp = &it->second.l;
    }
    auto& r = *rp;
    auto& l = *lp;
    const auto hits = [&] { return typed ? typed->hits : json->value("hits", std::uint64_t{0}); };
    const auto waited = [&] { return typed ? typed->waited : json->value("waited", false); };
    const nlohmann::json empty;
    const nlohmann::json& d = json ? *json : empty;

    switch (e.id) {
      case event_id::throttle_delayed:
      case event_id::slow_down_delayed:
        open(r, l, begin(r, l, g, e.at, gate_outcome::delayed, hits()), e.at);
        break;
      case event_id::throttle_passed:
      case event_id::slow_down_passed:
        if (waited())
          close(r, l, e.at);
        else
          begin(r, l, g, e.at, gate_outcome::passed, hits());
        break;
      case event_id::throttle_rejected:
      case event_id::slow_down_rejected:
      case event_id::rate_limit_rejected:
        begin(r, l, g, e.at, gate_outcome::rejected, hits());
        break;
      case event_id::rate_limit_passed:
        begin(r, l, g, e.at, gate_outcome::passed, hits());
        break;

      case event_id::delay_started: {
        const bool waits = d.value("delayMs", 0.0) > 0;
        const auto p = begin(r, l, g, e.at, waits ? gate_outcome::delayed : gate_outcome::passed);
        if (waits) open(r, l, p, e.at);
        break;
      }
      case event_id::delay_stopped:
        close(r, l, e.at);
        break;

      case event_id::retry_started:
        begin(r, l, g, e.at, gate_outcome::passed, 1);
        break;
      case event_id::retry_attempt: {
        close(r, l, e.at);
        const auto p = last_pass_of(r, g);
        if (!p) break;
        r.passes[*p].hit = d.value("attemptNumber", std::uint64_t{1}) + 1;
        r.passes[*p].outcome = gate_outcome::retried;
        open(r, l, *p, e.at);
        break;
      }
      case event_id::retry_stopped: {
        close(r, l, e.at);
        const auto p = last_pass_of(r, g);
        if (!p) break;
        auto& pass = r.passes[*p];
        pass.hit = d.value("attemptNumber", std::uint64_t{1});
        const auto& o = std::get<retry_options>(s_.gates[g].options);
        if (d.value("success", false))
          pass.outcome = pass.hit > 1 ? gate_outcome::retried : gate_outcome::passed;
        else
          pass.outcome = pass.hit >= std::uint64_t(o.max_attempts) ? gate_outcome::exhausted : gate_outcome::stopped;
        break;
      }
      default:
        break;
    }
  }

  void service_started(std::uint32_t id, time_point now) {
    auto& r = req(id);
    auto& l = live(id);
    close(r, l, now);
    ++l.service_attempts;
    r.passes.push_back({service_gate, gate_outcome::served, 0, now, {}});
    open(r, l, std::uint32_t(r.passes.size() - 1), now);
  }
  std::uint32_t service_attempts(std::uint32_t id) const { return live(id).service_attempts; }
  void service_ended(std::uint32_t id, time_point now, gate_outcome o) {
    auto& r = req(id);
    auto& l = live(id);
    if (l.open && l.open_gate == service_gate) r.passes[l.open_pass].outcome = o;
    close(r, l, now);
  }

  void finished(std::uint32_t id, const run_result& result, bool client_gone, time_point now) {
    auto& r = req(id);
    auto& l = live(id);
    if (l.open) {
      const std::uint32_t p = l.open_pass;
      close(r, l, now);
      if (client_gone) r.passes[p].outcome = gate_outcome::abandoned;
    }
    r.ended = now;
    rep_.finished = std::max(rep_.finished, now);
    const auto& o = result.result;
    if (o.ok()) {
      r.outcome = request_outcome::served;
      r.status = 200;
    } else if (client_gone || o.is_drop()) {
      r.outcome = request_outcome::abandoned;
      r.reason = o.is_drop() ? o.reason : rc::message_of(o.error);
      if (client_gone) r.reason = "client-gone";
    } else {
      const rc::error err = rc::to_error(o.error);
      r.reason = err.what();
      const auto& det = err.details();
      if (err.code() == errc::rate_limited) {
        r.outcome = request_outcome::refused;
        r.status = det.contains("status") && det["status"].is_number_integer() ? det["status"].get<int>() : 429;
        if (auto it = det.find("retry_after_ms"); it != det.end() && it->is_number())
          r.retry_after = duration(static_cast<std::int64_t>(std::llround(it->get<double>() * 1e6)));
      } else {
        r.outcome = request_outcome::failed;
        r.status = det.contains("status") && det["status"].is_number_integer() ? det["status"].get<int>() : 500;
      }
    }
    if (keep_) read_notes(r, result.ex.limit_notes());  // headers and windows: the table, files and chart
    if (on_finished_) on_finished_(r);
    if (!keep_) open_.erase(id);  // told, then forgotten: memory stays that of the requests in flight
  }

  void finalize() {
    std::sort(rep_.windows.begin(), rep_.windows.end(), [](const window_mark& a, const window_mark& b) {
      return std::tie(a.from, a.gate, a.key) < std::tie(b.from, b.gate, b.key);
    });
    live_.clear();
    live_.shrink_to_fit();
    // Requests still open (a run stopped early) are told as they stand, in id order.
    if (!open_.empty()) {
      std::vector<std::uint32_t> ids;
      for (const auto& [id, o] : open_) ids.push_back(id);
      std::sort(ids.begin(), ids.end());
      for (auto id : ids)
        if (on_finished_) on_finished_(open_.find(id)->second.r);
      open_.clear();
    }
  }

 private:
  request_result& req(std::uint32_t id) { return keep_ ? rep_.requests[id - 1] : open_.find(id)->second.r; }
  const request_result& req(std::uint32_t id) const { return keep_ ? rep_.requests[id - 1] : open_.find(id)->second.r; }
  live_state& live(std::uint32_t id) { return keep_ ? live_[id - 1] : open_.find(id)->second.l; }
  const live_state& live(std::uint32_t id) const { return keep_ ? live_[id - 1] : open_.find(id)->second.l; }

  /// The scenario gate of a typed event's gate step: looked up by its gateId once, then by address
  /// (several million events name a handful of gates).
  std::optional<std::uint16_t> gate_of(const rc::gate_event& e) {
    for (const auto& [step, index] : gate_steps_)
      if (step == e.gate) return index;
    const auto it = ids_.find(e.gate_id());
    if (it == ids_.end()) return std::nullopt;
    gate_steps_.emplace_back(e.gate, it->second);
    return it->second;
  }

  static std::optional<std::uint32_t> last_pass_of(const request_result& r, std::uint16_t gate) {
    for (std::size_t i = r.passes.size(); i-- > 0;)
      if (r.passes[i].gate == gate) return std::uint32_t(i);
    return std::nullopt;
  }

  /// A request enters gate `g` (a scenario gate index).
  std::uint32_t begin(request_result& r, live_state& l, std::uint16_t g, time_point at, gate_outcome o,
                      std::uint64_t hit = 0) {
    close(r, l, at);
    r.passes.push_back({g, o, hit, at, {}});
    return std::uint32_t(r.passes.size() - 1);
  }

  void open(request_result& r, live_state& l, std::uint32_t pass, time_point at) {
    l.open = true;
    l.open_gate = r.passes[pass].gate;
    l.open_pass = pass;
    l.open_from = at;
  }

  void close(request_result& r, live_state& l, time_point at) {
    if (!l.open) return;
    l.open = false;
    if (at > l.open_from) {
      r.passes[l.open_pass].wait += at - l.open_from;
      if (keep_) r.segments.push_back({l.open_gate, l.open_from, at});  // the chart's only
    }
  }

  /// Limit notes come one per slow_down / rate_limit passage, in order: pair them with those
  /// passes to learn each one's gate, then keep the last note of each gate for the response.
  void read_notes(request_result& r, const std::vector<limit_note>& notes) {
    if (notes.empty()) return;
    std::vector<std::pair<std::uint16_t, const limit_note*>> last;
    std::size_t n = 0;
    for (const auto& p : r.passes) {
      if (p.gate >= s_.gates.size()) continue;
      const auto kind = s_.gates[p.gate].kind;
      if (kind != gate_kind::slow_down && kind != gate_kind::rate_limit) continue;
      if (n >= notes.size()) break;
      const limit_note& note = notes[n++];
      record_window(r, p, note);
      auto it = std::find_if(last.begin(), last.end(), [&](const auto& e) { return e.first == p.gate; });
      if (it == last.end())
        last.emplace_back(p.gate, &note);
      else
        it->second = &note;
    }
    std::sort(last.begin(), last.end(),
              [&](const auto& a, const auto& b) { return position_[a.first] < position_[b.first]; });
    for (const auto& [gate, note] : last) {
      const auto* rl = std::get_if<rate_limit_options>(&s_.gates[gate].options);
      const bool appends = rl && includes(rl->headers, rate_limit_headers::draft_8);
      for (const auto& [name, value] : rate_limit_headers_of(*note)) {
        // A lambda may capture a structured binding since C++20, clang only since 16: the fuzz build is clang 14.
        auto it = std::find_if(r.headers.begin(), r.headers.end(), [&n = name](const auto& h) { return h.first == n; });
        if (it == r.headers.end())
          r.headers.emplace_back(name, value);
        else if (appends && (name == "RateLimit" || name == "RateLimit-Policy"))
          it->second += ", " + value;
        else
          it->second = value;  // express: a later limiter sets the header again
      }
    }
  }

  void record_window(const request_result& r, const gate_pass& p, const limit_note& note) {
    const auto& g = s_.gates[p.gate];
    if (!g.fixed_window || g.key.from == key_spec::source::header) return;
    const time_point end = p.at + note.reset;
    const std::uint32_t key = g.key.from == key_spec::source::none ? window_mark::all_keys : r.key;
    if (windows_seen_.insert({p.gate, key, end.time_since_epoch().count()}).second)
      rep_.windows.push_back({p.gate, key, end - note.window, end});
  }

  struct open_request {
    request_result r;
    live_state l;
  };

  const scenario& s_;
  run_report& rep_;
  bool keep_;
  std::function<void(const request_result&)> on_finished_;
  static constexpr std::uint32_t unset = 0xffffffffU;
  std::vector<live_state> live_;                           // keep_: one per request
  std::unordered_map<std::uint32_t, open_request> open_;   // !keep_: the requests not finished yet
  std::map<std::string, std::uint16_t, std::less<>> ids_;  // gateId -> scenario gate index
  // gate_of's cache: gate step -> scenario gate index.
  std::vector<std::pair<const rc::wrapper*, std::uint16_t>> gate_steps_;
  std::vector<int> position_;  // chain position of each gate
  std::map<std::string, std::uint32_t> key_index_;
  std::vector<std::uint32_t> entry_key_;  // key index of each traffic entry, once it arrived
  std::set<std::tuple<std::uint16_t, std::uint32_t, std::int64_t>> windows_seen_;
};

// ---------------------------------------------------------------------------------------------
// The downstream: waits service_ms; fails a request's first `fail_first` attempts (503).

class service_step final : public rc::step {
 public:
  service_step(duration service, recorder* rec) : service_(service), rec_(rec) {}
  std::string_view operation() const override { return "service"; }

  task<outcome> run(exchange& ex, route_runtime& rt) override {
    const std::uint32_t id = ex.body<std::uint32_t>();
    rec_->service_started(id, rt.now());
    if (service_ > duration::zero()) {
      const wait_result w = co_await rt.clock().wait_until(rt.now() + service_, &rt.intake(), ex.abort_signal());
      if (w == wait_result::cancelled && ex.abort_signal() && ex.abort_signal()->fired()) {
        rec_->service_ended(id, rt.now(), gate_outcome::abandoned);
        co_return outcome::dropped("client-gone");
      }
    }
    const std::uint32_t attempt = rec_->service_attempts(id);
    const std::uint32_t failures = rec_->fail_first(id);
    if (attempt <= failures) {
      rec_->service_ended(id, rt.now(), gate_outcome::failed);
      co_return outcome::failed(std::make_exception_ptr(
          error(errc::connection_failed,
                fmt::format("downstream answered 503 (simulated failure {} of {})", attempt, failures), true, nullptr,
                {{"status", 503}})));
    }
    rec_->service_ended(id, rt.now(), gate_outcome::served);
    co_return outcome::proceed();
  }

 private:
  duration service_;
  recorder* rec_;
};

// ---------------------------------------------------------------------------------------------
// The traffic: every request at its arrival time, merged across entries in (time, entry) order.

struct client_state {
  explicit client_state(scheduler& clock) : gone(clock), done(clock) {}
  cancel_signal gone;  // the client stopped waiting (its timeout passed)
  cancel_signal done;  // the exchange ended: the timeout watch can stop
};

class traffic_source final : public rc::source<std::uint32_t> {
 public:
  traffic_source(const scenario& s, recorder* rec) : s_(&s), rec_(rec) {}
  std::string_view adapter() const override { return "rc-sim"; }

  task<void> run(source_context& sc) override {
    using item = std::tuple<std::int64_t, std::uint32_t, std::uint64_t>;  // (at ns, entry, ordinal)
    std::priority_queue<item, std::vector<item>, std::greater<>> next;
    for (std::uint32_t t = 0; t < s_->traffic.size(); ++t) next.emplace(s_->traffic[t].at.count(), t, 0);
    std::uint32_t id = 0;
    route_runtime& rt = sc.route();
    while (!next.empty()) {
      const auto [at_ns, entry, ordinal] = next.top();
      next.pop();
      const auto& t = s_->traffic[entry];
      if (ordinal + 1 < t.count) next.emplace(at_ns + t.spacing.count(), entry, ordinal + 1);
      const time_point at{duration(at_ns)};
      if (at > rt.now()) co_await sc.sleep_until(at);
      if (sc.stopping()) break;
      launch(rt, ++id, entry, at);
    }
  }

 private:
  void launch(route_runtime& rt, std::uint32_t id, std::uint32_t entry, time_point at) {
    const auto& t = s_->traffic[entry];
    rec_->arrived(id, entry, t.key, at);
    exchange ex;
    ex.set_body(id);
    rt.adopt(ex);
    ex.set_correlation_id(std::to_string(id));  // events name the request by it
    if (!t.key.empty()) ex.set_header(rc::client_header, t.key);
    for (const auto& [name, value] : t.headers) ex.set_header(name, value);
    std::shared_ptr<client_state> client;
    if (t.client_timeout) {
      client = std::make_shared<client_state>(rt.clock());
      const time_point deadline = at + *t.client_timeout;
      ex.set_deadline(deadline);
      ex.set_abort_signal(&client->gone);
      // Watch first: at a tie the client's timeout fires before a gate's wait of the same instant.
      rc::spawn([client, deadline, &rt]() -> task<void> {
        if (co_await rt.clock().wait_until(deadline, &client->done) == wait_result::elapsed) client->gone.fire();
      });
    }
    rc::spawn([this, id, client, &rt, ex = std::move(ex)]() mutable -> task<void> {
      // (no co_await inside ?: -- see route.cpp)
      std::optional<run_result> r;
      if (rt.all_synchronous())
        r.emplace(rt.process_now(std::move(ex)));
      else
        r.emplace(co_await rt.process(std::move(ex)));
      const bool gone = client && client->gone.fired();
      rec_->finished(id, *r, gone, rt.now());
      if (client) client->done.fire();
    });
  }

  const scenario* s_;
  recorder* rec_;
};

}  // namespace

void check_scenario(const scenario& s) {
  (void)build_route(s, traffic_source(s, nullptr), std::make_unique<service_step>(s.service, nullptr));
}

run_report run_scenario(const scenario& s, const run_options& o) {
  run_report rep;
  recorder rec(s, rep, o);
  rc::context ctx(rc::virtual_time, {.id = "rc-sim"});
  std::vector<subscription> subs;
  for (const char* name : {"route:throttle:passed", "route:throttle:delayed", "route:throttle:rejected",
                           "route:slowDown:passed", "route:slowDown:delayed", "route:slowDown:rejected",
                           "route:rateLimit:passed", "route:rateLimit:rejected", "route:retry:started",
                           "route:retry:attempt", "route:retry:stopped", "route:delay:started", "route:delay:stopped"})
    subs.push_back(ctx.on(name, [&rec](const rc::event& e) { rec.on_event(e); }));
  ctx.add(build_route(s, traffic_source(s, &rec), std::make_unique<service_step>(s.service, &rec)));
  ctx.start();
  ctx.drain();
  ctx.run_until_idle();  // the timeout watches of finished requests wake and end
  ctx.stop();
  rec.finalize();
  return rep;
}

}  // namespace rc::sim
