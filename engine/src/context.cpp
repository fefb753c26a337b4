#include "rc/context.hpp"

#include <fmt/chrono.h>
#include <fmt/format.h>

#include <algorithm>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <condition_variable>
#include <ctime>
#include <random>
#include <thread>

#include "rc/error.hpp"
#include "rc/gates/spin_mutex.hpp"
#include "rc/options.hpp"
#include "rc/timer_race.hpp"
#include "rc/tsc_clock.hpp"

namespace asio = boost::asio;

namespace rc {
namespace {

// The most context_options::timer_lead may be: a longer spin would hold a thread for nothing.
constexpr duration max_timer_lead = std::chrono::milliseconds(10);

// The real clock: steady_clock, re-based to the context's creation so engine times stay small.
// One asio timer is armed for the earliest pending wait; the heap does the rest. With
// context_options::timer_race, helper threads on every core race that timer (rc/timer_race.hpp):
// whichever wakes first while the wait is still armed takes it up.
class steady_scheduler final : public scheduler {
 public:
  steady_scheduler(asio::io_context& io, duration lead, bool race, bool counter)
      : epoch_(std::chrono::steady_clock::now()),
        counter_(counter && detail::tsc_clock::usable() ? &detail::tsc_clock::instance() : nullptr),
        lead_(lead),
        timer_(io) {
    timespec res{};
    if (::clock_getres(CLOCK_MONOTONIC_COARSE, &res) == 0)
      coarse_resolution_ = std::chrono::seconds(res.tv_sec) + std::chrono::nanoseconds(res.tv_nsec);
    if (race) {
      race_ = std::make_unique<detail::timer_race>([this, &io] { asio::post(io, [this] { race_won(); }); });
      if (race_->helpers() == 0) race_.reset();
    }
  }

  time_point now() const override {
    if (counter_) return time_point(duration(counter_->now_ns()) - epoch_.time_since_epoch());
    return time_point(std::chrono::duration_cast<duration>(std::chrono::steady_clock::now() - epoch_));
  }

  // steady_clock is CLOCK_MONOTONIC on Linux; its coarse variant reads the last tick without
  // touching the hardware counter (a few ns instead of tens on a busy VM).
  time_point coarse_now() const override {
    if (coarse_resolution_ == duration::max()) return now();
    timespec ts{};
    ::clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    const auto t = std::chrono::seconds(ts.tv_sec) + std::chrono::nanoseconds(ts.tv_nsec);
    return time_point(std::chrono::duration_cast<duration>(t - epoch_.time_since_epoch()));
  }
  duration coarse_resolution() const noexcept override {
    return coarse_resolution_ == duration::max() ? duration::zero() : coarse_resolution_;
  }
  // Read afresh each time: a step of the system clock shows in the next conversion.
  duration wall_offset() const override {
    return std::chrono::duration_cast<duration>(std::chrono::system_clock::now().time_since_epoch()) -
           now().time_since_epoch();
  }

  ~steady_scheduler() override {
    race_.reset();  // no poke after this; one already posted is dropped with the io_context's queue
    std::lock_guard lock(mutex_);
    timer_.cancel();
  }

 protected:
  void earliest_changed(time_point due) override {  // mutex_ held
    if (due >= armed_) return;
    armed_ = due;
    const auto wake_at = epoch_ + (due - lead_).time_since_epoch();
    timer_.expires_at(wake_at);
    if (race_) race_->aim(wake_at);
    timer_.async_wait([this, due](const boost::system::error_code& ec) {
      if (ec == asio::error::operation_aborted) return;
      {
        std::lock_guard lock(mutex_);
        armed_ = time_point::max();
        if (race_) race_->taken();
      }
      fire_armed(due);
    });
  }

 private:
  // A helper of the race woke first (or just after the timer): take up the armed wait if it is
  // still armed and its wake-up time has come; else the timer took it up, or it was moved later.
  void race_won() {
    time_point due;
    {
      std::lock_guard lock(mutex_);
      // The helper woke on steady_clock: ask that clock (the counter's may be a few ns behind it).
      if (armed_ == time_point::max() ||
          std::chrono::steady_clock::now() < epoch_ + (armed_ - lead_).time_since_epoch())
        return;
      due = armed_;
      armed_ = time_point::max();  // the asio timer, if it still fires, finds nothing due
    }
    fire_armed(due);
  }

  void fire_armed(time_point due) {
    // timer_lead: woken early on purpose; the rest of the way on the clock. A wait that came due
    // earlier meanwhile armed a timer of its own and is fired with this one.
    if (lead_ > duration::zero()) {
      while (now() < due) detail::cpu_pause();
    }
    // Without a lead the wait is due by steady_clock, on which the timer fell due; the counter's
    // clock may read a few ns behind it.
    fire_due(std::max(now(), due), false);
  }

  std::chrono::steady_clock::time_point epoch_;
  detail::tsc_clock* counter_;                    // context_options::tsc_clock, where usable; else steady_clock
  duration lead_;                                 // context_options::timer_lead
  duration coarse_resolution_ = duration::max();  // max: no coarse clock, coarse_now() is now()
  asio::steady_timer timer_;
  time_point armed_ = time_point::max();
  std::unique_ptr<detail::timer_race> race_;  // context_options::timer_race, where it has helpers
};

std::string random_context_id() {
  std::random_device rd;
  return fmt::format("ctx-{:08x}{:08x}", rd(), rd());
}

std::string iso_timestamp(std::chrono::system_clock::time_point tp) {
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(tp.time_since_epoch()).count();
  const std::time_t secs = static_cast<std::time_t>(ms / 1000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  return fmt::format("{:%Y-%m-%dT%H:%M:%S}.{:03}Z", tm, ms % 1000);
}

// The context's io_context, able to drop what is queued on it before the rest of the context goes.
class context_io : public asio::io_context {
 public:
  /// Destroys every pending handler without running it (what ~io_context would do later).
  void discard_pending() { shutdown(); }
};

}  // namespace

struct context::impl {
  context_options options;
  bool is_virtual;
  context_io io;
  std::unique_ptr<scheduler> clock;
  manual_clock* manual = nullptr;
  std::unique_ptr<event_bus> bus;
  std::vector<std::unique_ptr<route_runtime>> routes;
  // Guards `routes` against add() while snapshot() or ready() reads it from another thread.
  mutable std::mutex routes_mutex;
  std::atomic<bool> started{false};   // start() was called
  std::atomic<bool> stopping{false};  // stop() was called (set before context:stopping)
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> guard;
  std::vector<std::thread> threads;

  std::mutex mutex;  // guards the condition below
  std::condition_variable idle_cv;
  std::atomic<std::size_t> work{0};            // runs in flight + other tracked work
  std::atomic<std::size_t> finite_sources{0};  // finite sources still producing
  // Every source coroutine still running, endless ones included. stop() waits for them after
  // closing intake, so no source frame is left suspended when the executor stops.
  std::atomic<std::size_t> open_sources{0};
  enum class state { created, started, stopped } phase = state::created;
  std::optional<stop_result> stopped_with;
  // The frames of blocking calls (send_sync, request_sync): one that never finishes is freed with
  // the context, like an abandoned run.
  detail::frame_set calls;

  impl(context_options o, bool virt) : options(std::move(o)), is_virtual(virt) {
    if (options.shutdown_timeout <= duration::zero())
      throw error(errc::bad_shutdown_timeout,
                  fmt::format("context shutdown_timeout must be > 0, got {}ms", to_ms(options.shutdown_timeout)));
    if (options.threads == 0) throw error(errc::misconfigured, "context threads must be >= 1, got 0");
    if (options.timer_lead < duration::zero() || options.timer_lead > max_timer_lead)
      invalid_option("context", "timerLead", "between 0ms and " + ms_text(max_timer_lead), ms_text(options.timer_lead));
    if (options.id.empty()) options.id = random_context_id();
    if (is_virtual) {
      auto m = std::make_unique<manual_clock>();
      manual = m.get();
      clock = std::move(m);
    } else {
      clock = std::make_unique<steady_scheduler>(io, options.timer_lead, options.timer_race, options.tsc_clock);
    }
    clock->set_executor([this](std::coroutine_handle<> h) { asio::post(io, [h] { h.resume(); }); });
    auto render = is_virtual ? std::function<std::string(time_point)>([this](time_point t) {
      return iso_timestamp(std::chrono::time_point_cast<std::chrono::system_clock::duration>(clock->to_wall(t)));
    })
                             : std::function<std::string(time_point)>(
                                   [](time_point) { return iso_timestamp(std::chrono::system_clock::now()); });
    bus = std::make_unique<event_bus>(
        options.id, [this] { return clock->now(); }, std::move(render));
  }

  std::atomic<int> waiting{0};  // threads blocked in drain()/stop(); completions notify only then

  // Wakes drain()/stop() only on the way to idle. A sequential source takes its route's runs in
  // flight from 1 to 0 for every exchange while it is still producing; waking the waiter each
  // time would cost a futex wake (and a mutex fight) per exchange. The counters' decrements and
  // these loads are all seq_cst, so of two threads zeroing two of the counters at once (`work`,
  // `finite_sources`, a route's in_flight_), at least one sees all of them zero and notifies.
  void notify() {
    if (waiting.load() == 0 || !idle()) return;  // seq_cst pairs with the waiter's increment
    std::lock_guard lock(mutex);
    idle_cv.notify_all();
  }
  // Route runs are counted by their route only (route_runtime::begin_run): one locked
  // instruction per run and end rather than two. So idle reads every route's count; it is asked
  // only by drain()/stop() and, on the way to idle, while one of them waits.
  bool idle() const {
    if (work.load() != 0 || finite_sources.load() != 0) return false;
    std::lock_guard lock(routes_mutex);
    return std::all_of(routes.begin(), routes.end(), [](const auto& r) { return r->in_flight_.load() == 0; });
  }

  /// The calls that move or read virtual time refuse a real-time context.
  void require_virtual(std::string_view call) const {
    if (!is_virtual)
      throw error(errc::invalid_dsl, fmt::format("{}() needs a context built with rc::virtual_time", call));
  }

  // Virtual time: run ready work; when none is left, jump to the next wait; stop when `done()`
  // or when nothing is ready and nothing waits before `limit`.
  template <class Done>
  void run_virtual(time_point limit, Done done) {
    for (;;) {
      io.restart();
      const std::size_t ran = io.poll();
      if (done()) return;
      if (ran > 0) continue;
      if (!manual->fire_next(limit)) return;
    }
  }

  task<void> run_source(route_runtime& rt) {
    source_context sc(rt);
    const bool finite = rt.definition().source->finite();
    bus->emit(event_id::route_started, [&] { return nlohmann::json{{"routeId", rt.id()}}; });
    rt.started_.store(true, std::memory_order_release);
    try {
      co_await rt.definition().source->run(sc);
    } catch (...) {
      const error err = to_error(std::current_exception());
      const nlohmann::json e = {{"code", err.code_string()}, {"message", err.message()}};
      bus->emit(event_id::route_source_failed, [&] {
        return nlohmann::json{{"routeId", rt.id()}, {"adapter", rt.definition().source->adapter()}, {"error", e}};
      });
      bus->emit(event_id::context_error, [&] { return nlohmann::json{{"error", e}, {"route", rt.id()}}; });
    }
    open_sources.fetch_sub(1);  // seq_cst: see notify()
    if (finite) {
      rt.source_done_.store(true);  // seq_cst: see route_runtime::end_run
      if (rt.in_flight_.load() == 0) rt.announce_stopped();
      finite_sources.fetch_sub(1);  // seq_cst: see notify()
    }
    notify();
  }
};

context::context() : context(context_options{}) {}
context::context(context_options options) : impl_(std::make_unique<impl>(std::move(options), false)) {}
context::context(virtual_time_t, context_options options) : impl_(std::make_unique<impl>(std::move(options), true)) {}

context::~context() {
  if (impl_->phase == impl::state::started) stop();
  // A forced stop may have abandoned runs (and sources) suspended in a step that never finished.
  // Nothing can resume them now: free their frames while the routes, clock and bus they refer to
  // still exist. Resumptions still queued on the io_context go with it, never run.
  for (auto& r : impl_->routes) r->frames_.destroy_all();
  impl_->calls.destroy_all();
  // Then the handlers still queued (a socket's pending read holds its HTTP connection, which
  // holds an exchange's abort signal): destroyed now, while the clock and the bus they may touch
  // still exist, rather than by ~io_context after them.
  impl_->io.discard_pending();
}

route_runtime& context::add(route_definition def) {
  if (impl_->phase == impl::state::stopped) throw error(errc::context_stopped, "add() on a stopped context");
  if (!def.source) throw error(errc::no_usable_source, fmt::format("route \"{}\" has no source", def.id));
  for (const auto& r : impl_->routes)
    if (r->id() == def.id) throw error(errc::duplicate_route, fmt::format("duplicate route id \"{}\"", def.id));
  auto made = std::make_unique<route_runtime>(*this, std::move(def));
  route_runtime& rt = *made;
  {
    std::lock_guard lock(impl_->routes_mutex);
    impl_->routes.push_back(std::move(made));
  }
  impl_->bus->emit(event_id::route_registered, [&] { return nlohmann::json{{"routeId", rt.id()}}; });
  if (impl_->phase == impl::state::started) {
    rt.definition().source->attach(rt);
    if (rt.definition().source->finite()) impl_->finite_sources.fetch_add(1);
    impl_->open_sources.fetch_add(1);
    rc::spawn(rt.frames_, [this, &rt] { return impl_->run_source(rt); });
  }
  return rt;
}

void context::start() {
  auto& m = *impl_;
  if (m.phase == impl::state::stopped) throw error(errc::context_stopped, "start() on a stopped context");
  if (m.phase == impl::state::started) return;
  m.phase = impl::state::started;
  m.started.store(true, std::memory_order_release);
  m.bus->emit(event_id::context_starting, [] { return nlohmann::json::object(); });
  m.bus->emit(event_id::context_started, [] { return nlohmann::json::object(); });
  // Every source attaches before any runs: an event route then sees every route from its first
  // step, whatever the order the routes were added in.
  for (auto& r : m.routes) r->definition().source->attach(*r);
  for (auto& r : m.routes) {
    m.bus->emit(event_id::route_starting, [&] { return nlohmann::json{{"routeId", r->id()}}; });
    if (r->definition().source->finite()) m.finite_sources.fetch_add(1);
    m.open_sources.fetch_add(1);
    route_runtime* rt = r.get();
    asio::post(m.io, [&m, rt] { rc::spawn(rt->frames_, [&m, rt] { return m.run_source(*rt); }); });
  }
  if (!m.is_virtual) {
    m.guard.emplace(m.io.get_executor());
    for (unsigned i = 0; i < m.options.threads; ++i) m.threads.emplace_back([&m] { m.io.run(); });
  }
}

void context::drain() {
  auto& m = *impl_;
  if (m.phase != impl::state::started) return;
  if (m.is_virtual) {
    m.run_virtual(time_point::max(), [&] { return m.idle(); });
    return;
  }
  m.waiting.fetch_add(1);
  {
    std::unique_lock lock(m.mutex);
    m.idle_cv.wait(lock, [&] { return m.idle(); });
  }
  m.waiting.fetch_sub(1);
}

stop_result context::stop() {
  auto& m = *impl_;
  if (m.stopped_with) return *m.stopped_with;
  if (m.phase == impl::state::created) {
    m.phase = impl::state::stopped;
    m.stopped_with = stop_result{};
    return *m.stopped_with;
  }
  m.stopping.store(true, std::memory_order_release);  // not ready from here on (http_source's /ready)
  m.bus->emit(event_id::context_stopping, [] { return nlohmann::json::object(); });
  // Stage one: close intake. Sources stop producing; waiting gates wake and admit.
  // A finite route that already finished announced route:stopping/stopped then.
  for (auto& r : m.routes) {
    const bool announce = r->claim_stop_announcement();
    if (announce) m.bus->emit(event_id::route_stopping, [&] { return nlohmann::json{{"routeId", r->id()}}; });
    r->intake().fire();
    if (announce) m.bus->emit(event_id::route_stopped, [&] { return nlohmann::json{{"routeId", r->id()}}; });
  }
  // Drain, bounded: in-flight exchanges finish and every source returns (intake is closed).
  auto in_flight = [&] { return m.idle() && m.open_sources.load() == 0; };
  if (m.is_virtual) {
    const time_point limit = m.clock->now() + m.options.shutdown_timeout;
    m.run_virtual(limit, in_flight);
  } else {
    m.waiting.fetch_add(1);
    {
      std::unique_lock lock(m.mutex);
      m.idle_cv.wait_for(lock, m.options.shutdown_timeout, in_flight);
    }
    m.waiting.fetch_sub(1);
  }
  stop_result result;
  if (!in_flight()) {
    result.forced = true;
    for (auto& r : m.routes)
      if (r->in_flight() > 0) result.pending.push_back(r->id());
  }
  if (!m.is_virtual) {
    m.guard.reset();
    m.io.stop();
    for (auto& t : m.threads) t.join();
    m.threads.clear();
  }
  m.phase = impl::state::stopped;
  m.stopped_with = result;
  m.bus->emit(event_id::context_stopped, [&] {
    return nlohmann::json{{"forced", result.forced}, {"pending", result.pending}};
  });
  return result;
}

bool context::is_virtual() const noexcept { return impl_->is_virtual; }

void context::advance(duration d) { advance_to(now() + d); }

void context::advance_to(time_point t) {
  auto& m = *impl_;
  m.require_virtual("advance");
  m.run_virtual(t, [] { return false; });
  m.manual->set_now(t);
  m.io.restart();
  m.io.poll();
}

void context::run_until_idle() {
  auto& m = *impl_;
  m.require_virtual("run_until_idle");
  m.run_virtual(time_point::max(), [] { return false; });
}

void context::set_wall_time(wall_time w) {
  auto& m = *impl_;
  m.require_virtual("set_wall_time");
  m.manual->set_wall_time(w);
}

void context::stall(duration d) {
  auto& m = *impl_;
  m.require_virtual("stall");
  m.manual->set_now(now() + d);
}

time_point context::now() const { return impl_->clock->now(); }
std::int64_t context::wall_time_ms() const {
  using std::chrono::duration_cast;
  using std::chrono::milliseconds;
  if (impl_->is_virtual) return duration_cast<milliseconds>(impl_->clock->wall_now().time_since_epoch()).count();
  return duration_cast<milliseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}
scheduler& context::clock() noexcept { return *impl_->clock; }
event_bus& context::events() noexcept { return *impl_->bus; }
const std::string& context::id() const noexcept { return impl_->options.id; }

route_runtime* context::find_route(std::string_view id) noexcept {
  for (auto& r : impl_->routes)
    if (r->id() == id) return r.get();
  return nullptr;
}

const std::vector<std::unique_ptr<route_runtime>>& context::routes() const noexcept { return impl_->routes; }

context_snapshot context::snapshot() const {
  const auto& m = *impl_;
  context_snapshot s;
  s.started = m.started.load(std::memory_order_acquire);
  s.stopping = m.stopping.load(std::memory_order_acquire);
  bool all_started = true;
  {
    std::lock_guard lock(m.routes_mutex);
    s.routes.reserve(m.routes.size());
    for (const auto& r : m.routes) {
      s.routes.push_back(r->snapshot());
      all_started = all_started && s.routes.back().started;
    }
  }
  s.ready = s.started && !s.stopping && all_started;
  return s;
}

bool context::ready() const {
  const auto& m = *impl_;
  if (!m.started.load(std::memory_order_acquire) || m.stopping.load(std::memory_order_acquire)) return false;
  std::lock_guard lock(m.routes_mutex);
  for (const auto& r : m.routes)
    if (!r->started()) return false;
  return true;
}

void context::post(std::function<void()> f) { asio::post(impl_->io, std::move(f)); }

asio::io_context& context::io() noexcept { return impl_->io; }

unsigned context::threads() const noexcept { return impl_->is_virtual ? 1 : impl_->options.threads; }

void context::block_on(std::string_view call, std::function<task<void>()> make) {
  auto& m = *impl_;
  if (m.phase == impl::state::created)
    throw error(errc::invalid_dsl, fmt::format("{}() needs a started context: call start() first", call));
  if (m.phase == impl::state::stopped)
    throw error(errc::context_stopped, fmt::format("{}() on a stopped context", call));
  // Blocking one of the context's threads could wait for work only that thread would run (the only
  // thread by default; in virtual time the caller runs everything).
  if (m.io.get_executor().running_in_this_thread())
    throw error(errc::invalid_dsl,
                fmt::format("{}() would block the context's own thread: co_await ctx.{}() there instead", call,
                            call.substr(0, call.size() - 5)));
  struct shared_state {
    std::function<task<void>()> make;
    std::mutex mutex;
    std::condition_variable done_cv;
    bool done = false;
    std::exception_ptr failure;
  };
  auto state = std::make_shared<shared_state>();
  state->make = std::move(make);
  work_started();  // drain() waits for the call as for a run
  // Posted, not run here: the sources start() queued run first, so their endpoints are there.
  asio::post(m.io, [this, &m, state] {
    rc::spawn(m.calls, [this, state]() -> task<void> {
      try {
        co_await state->make();
      } catch (...) {
        state->failure = std::current_exception();
      }
      {
        std::lock_guard lock(state->mutex);
        state->done = true;
      }
      state->done_cv.notify_all();
      work_finished();
    });
  });
  if (m.is_virtual) {
    m.run_virtual(time_point::max(), [&] { return state->done; });
    if (!state->done)
      throw error(errc::invalid_dsl,
                  fmt::format("{}(): the call cannot finish: nothing is left to run at {} ms (virtual) and no wait is "
                              "due (a step waiting for something that never happens?)",
                              call, to_ms(now().time_since_epoch())));
  } else {
    std::unique_lock lock(state->mutex);
    state->done_cv.wait(lock, [&] { return state->done; });
  }
  if (state->failure) std::rethrow_exception(normalise(state->failure));
}

void context::work_started() noexcept { impl_->work.fetch_add(1, std::memory_order_acq_rel); }

void context::work_finished() noexcept {
  if (impl_->work.fetch_sub(1) == 1) impl_->notify();
}

void context::runs_ended() noexcept { impl_->notify(); }

}  // namespace rc
