// rc::redis_connection (rc/redis.hpp): Asio socket, hiredis's RESP reader, a pipeline of pending
// commands answered in order.
//
// Threads: command() may be called from any thread. It appends the encoded command to `out_` and
// its entry to `pending_` under `mutex_`, and posts one "kick" to the strand for a whole batch.
// Everything touching the socket, the reader and the timers runs on the strand. Callbacks run on
// the strand too, always after `mutex_` is released, so a callback may issue commands.
//
// Timeouts: entries are queued in time order, so the timer walks the pipeline from its front and
// stops at the first entry queued less than the shortest timeout in use ago: nothing behind it
// can have expired. A timed-out entry keeps its place (its reply will still come, in order) with
// no callback.
#include <fmt/format.h>
#include <hiredis/hiredis.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/write.hpp>
#include <deque>
#include <mutex>
#include <random>

#include "rc/context.hpp"
#include "rc/error.hpp"
#include "rc/redis.hpp"

namespace rc {
namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using steady = std::chrono::steady_clock;

namespace {

class redis_category_impl final : public std::error_category {
 public:
  const char* name() const noexcept override { return "redis"; }
  std::string message(int c) const override {
    switch (static_cast<redis_errc>(c)) {
      case redis_errc::timeout:
        return "redis command timed out";
      case redis_errc::disconnected:
        return "redis connection is down";
      case redis_errc::closed:
        return "redis connection closed";
      case redis_errc::protocol:
        return "redis protocol error";
    }
    return "redis error";
  }
};

redis_reply convert(const redisReply* r) {
  redis_reply out;
  switch (r->type) {
    case REDIS_REPLY_STRING:
      out.type = redis_reply::kind::string;
      out.str.assign(r->str, r->len);
      break;
    case REDIS_REPLY_STATUS:
      out.type = redis_reply::kind::status;
      out.str.assign(r->str, r->len);
      break;
    case REDIS_REPLY_ERROR:
      out.type = redis_reply::kind::error;
      out.str.assign(r->str, r->len);
      break;
    case REDIS_REPLY_INTEGER:
      out.type = redis_reply::kind::integer;
      out.integer = r->integer;
      break;
    case REDIS_REPLY_ARRAY:
      out.type = redis_reply::kind::array;
      out.elements.reserve(r->elements);
      for (std::size_t i = 0; i < r->elements; ++i) out.elements.push_back(convert(r->element[i]));
      break;
    default:
      out.type = redis_reply::kind::nil;
  }
  return out;
}

void append_command(std::string& out, const std::vector<std::string>& args) {
  out += '*';
  out += std::to_string(args.size());
  out += "\r\n";
  for (const auto& a : args) {
    out += '$';
    out += std::to_string(a.size());
    out += "\r\n";
    out += a;
    out += "\r\n";
  }
}

}  // namespace

const std::error_category& redis_category() noexcept {
  static const redis_category_impl c;
  return c;
}

long long redis_reply::as_integer() const {
  if (type == kind::integer) return integer;
  if (type == kind::string) {
    try {
      std::size_t used = 0;
      long long v = std::stoll(str, &used);
      if (used == str.size()) return v;
    } catch (...) {
    }
  }
  throw error(errc::step_failed, "redis: expected an integer reply, got " +
                                     (type == kind::error ? "error " + str : std::string("another type")));
}

std::exception_ptr redis_failure(std::error_code ec, std::string_view what) {
  const errc code = ec == redis_errc::timeout ? errc::timed_out : errc::connection_failed;
  return std::make_exception_ptr(error(code, fmt::format("{}: {}", what, ec.message()), true));
}

struct redis_connection::impl : std::enable_shared_from_this<impl> {
  struct entry {
    callback done;  // empty once answered by a timeout (or an internal command)
    steady::time_point queued;
    steady::time_point deadline;
  };

  impl(asio::io_context& io, redis_options o)
      : io_(io),
        strand_(asio::make_strand(io)),
        socket_(strand_),
        resolver_(strand_),
        timeout_timer_(strand_),
        retry_timer_(strand_),
        connect_timer_(strand_),
        opt_(std::move(o)),
        rng_(std::random_device{}()) {
    min_timeout_ = opt_.command_timeout;
  }

  ~impl() {
    if (reader_ != nullptr) redisReaderFree(reader_);
  }

  void start() {
    auto self = shared_from_this();
    asio::post(strand_, [self] { self->connect(); });
  }

  // ---- commands (any thread) ----

  void command(const std::vector<std::string>& args, duration timeout, callback done) {
    const auto now = steady::now();
    const auto to = std::chrono::duration_cast<steady::duration>(timeout);
    bool kick = false;
    std::error_code fail;
    {
      std::lock_guard lock(mutex_);
      if (closed_)
        fail = redis_errc::closed;
      else if (down_)
        fail = redis_errc::disconnected;
      else {
        append_command(out_, args);
        ++unwritten_;
        pending_.push_back(entry{std::move(done), now, now + to});
        if (timeout < min_timeout_) min_timeout_ = timeout;
        if (now + to < new_min_deadline_) new_min_deadline_ = now + to;
        kick = !kick_posted_;
        kick_posted_ = true;
      }
    }
    if (fail) {
      stats_failed_.fetch_add(1, std::memory_order_relaxed);
      asio::post(strand_, [done = std::move(done), fail]() mutable { done(fail, redis_reply{}); });
      return;
    }
    if (kick) {
      auto self = shared_from_this();
      asio::post(strand_, [self] { self->on_kick(); });
    }
  }

  // ---- on the strand ----

  void on_kick() {
    steady::time_point earliest;
    {
      std::lock_guard lock(mutex_);
      kick_posted_ = false;
      earliest = new_min_deadline_;
      new_min_deadline_ = steady::time_point::max();
    }
    if (earliest < timer_due_) arm_timeout(earliest);
    write_more();
  }

  void write_more() {
    if (writing_ || !up_) return;
    std::size_t batch = 0;
    {
      std::lock_guard lock(mutex_);
      if (out_.empty()) return;
      wbuf_.clear();
      wbuf_.swap(out_);
      batch = unwritten_;
      unwritten_ = 0;
    }
    writing_ = true;
    stats_sent_.fetch_add(batch, std::memory_order_relaxed);
    auto self = shared_from_this();
    asio::async_write(socket_, asio::buffer(wbuf_), [self, gen = gen_](boost::system::error_code ec, std::size_t) {
      if (gen != self->gen_) return;  // a dropped socket's write: the flag is the new socket's now
      self->writing_ = false;
      if (ec) return self->drop();
      self->write_more();
    });
  }

  void start_read() {
    auto self = shared_from_this();
    socket_.async_read_some(asio::buffer(rbuf_), [self, gen = gen_](boost::system::error_code ec, std::size_t n) {
      if (gen != self->gen_) return;
      if (ec) return self->drop();
      self->on_data(n);
    });
  }

  void on_data(std::size_t n) {
    if (redisReaderFeed(reader_, rbuf_.data(), n) != REDIS_OK) return protocol_error();
    answered_.clear();
    for (;;) {
      void* raw = nullptr;
      if (redisReaderGetReply(reader_, &raw) != REDIS_OK) {
        deliver();
        return protocol_error();
      }
      if (raw == nullptr) break;
      redis_reply r = convert(static_cast<redisReply*>(raw));
      freeReplyObject(raw);
      callback cb;
      {
        std::lock_guard lock(mutex_);
        if (pending_.empty()) continue;  // cannot happen: a reply nobody asked for
        cb = std::move(pending_.front().done);
        pending_.pop_front();
      }
      stats_replies_.fetch_add(1, std::memory_order_relaxed);
      if (cb) answered_.emplace_back(std::move(cb), std::move(r));
    }
    deliver();
    start_read();
  }

  void deliver() {
    auto batch = std::move(answered_);
    answered_.clear();
    for (auto& [cb, r] : batch) cb({}, std::move(r));
  }

  void protocol_error() {
    fail_all(redis_errc::protocol, true);
    drop();
  }

  // Fails every pending command; the connection is then down (or closed).
  void fail_all(redis_errc why, bool mark_down) {
    std::deque<entry> failed;
    {
      std::lock_guard lock(mutex_);
      failed.swap(pending_);
      out_.clear();
      unwritten_ = 0;
      if (mark_down) down_ = true;
    }
    const std::error_code ec = why;
    for (auto& e : failed) {
      if (!e.done) continue;
      stats_failed_.fetch_add(1, std::memory_order_relaxed);
      e.done(ec, redis_reply{});
    }
  }

  void drop() {
    if (!up_ && !connecting_) return;
    ++gen_;
    boost::system::error_code ignored;
    socket_.close(ignored);
    const bool was_up = up_;
    up_ = false;
    up_flag_.store(false, std::memory_order_release);
    connecting_ = false;
    writing_ = false;
    fail_all(redis_errc::disconnected, true);
    if (was_up) {
      stats_disconnects_.fetch_add(1, std::memory_order_relaxed);
      notify(false);
    }
    schedule_reconnect();
  }

  void schedule_reconnect() {
    if (is_closed()) return;
    const auto base = std::min(opt_.reconnect_max, duration(opt_.reconnect_min * (1L << std::min(attempt_, 20))));
    ++attempt_;
    std::uniform_real_distribution<double> jitter(0.5, 1.0);
    const auto delay = std::chrono::duration_cast<steady::duration>(base * jitter(rng_));
    retry_timer_.expires_after(delay);
    auto self = shared_from_this();
    retry_timer_.async_wait([self](boost::system::error_code ec) {
      if (!ec) self->connect();
    });
  }

  void connect() {
    if (is_closed() || up_ || connecting_) return;
    connecting_ = true;
    const unsigned gen = ++gen_;
    auto self = shared_from_this();
    connect_timer_.expires_after(opt_.connect_timeout);
    connect_timer_.async_wait([self, gen](boost::system::error_code ec) {
      if (!ec && gen == self->gen_ && self->connecting_) self->connect_failed();
    });
    resolver_.async_resolve(opt_.host, std::to_string(opt_.port),
                            [self, gen](boost::system::error_code ec, tcp::resolver::results_type results) {
                              if (gen != self->gen_) return;
                              if (ec) return self->connect_failed();
                              asio::async_connect(self->socket_, results,
                                                  [self, gen](boost::system::error_code ec2, const tcp::endpoint&) {
                                                    if (gen != self->gen_) return;
                                                    if (ec2) return self->connect_failed();
                                                    self->connected();
                                                  });
                            });
  }

  void connect_failed() {
    ++gen_;
    connect_timer_.cancel();
    boost::system::error_code ignored;
    socket_.close(ignored);
    connecting_ = false;
    fail_all(redis_errc::disconnected, true);
    schedule_reconnect();
  }

  void connected() {
    connect_timer_.cancel();
    connecting_ = false;
    up_ = true;
    attempt_ = 0;
    boost::system::error_code ignored;
    socket_.set_option(tcp::no_delay(true), ignored);
    if (reader_ != nullptr) redisReaderFree(reader_);
    reader_ = redisReaderCreate();
    {
      // AUTH and SELECT go before anything queued meanwhile; their replies are not anyone's.
      std::lock_guard lock(mutex_);
      // connected() reads the flag under this mutex: whoever sees it up can queue a command at once.
      down_ = false;
      up_flag_.store(true, std::memory_order_release);
      std::string prefix;
      const auto now = steady::now();
      const auto far = now + std::chrono::hours(24 * 365);
      if (!opt_.password.empty()) {
        if (opt_.username.empty())
          append_command(prefix, {"AUTH", opt_.password});
        else
          append_command(prefix, {"AUTH", opt_.username, opt_.password});
        pending_.push_front(entry{nullptr, now, far});
        ++unwritten_;
      }
      if (opt_.database != 0) {
        append_command(prefix, {"SELECT", std::to_string(opt_.database)});
        pending_.insert(pending_.begin() + (opt_.password.empty() ? 0 : 1), entry{nullptr, now, far});
        ++unwritten_;
      }
      out_.insert(0, prefix);
    }
    stats_connects_.fetch_add(1, std::memory_order_relaxed);
    notify(true);
    start_read();
    write_more();
  }

  void notify(bool up) {
    state_callback f;
    {
      std::lock_guard lock(mutex_);
      f = on_state_;
    }
    if (f) f(up);
  }

  void arm_timeout(steady::time_point due) {
    timer_due_ = due;
    timeout_timer_.expires_at(due);
    auto self = shared_from_this();
    timeout_timer_.async_wait([self](boost::system::error_code ec) {
      if (ec) return;  // re-armed or closed
      self->on_timeout_timer();
    });
  }

  void on_timeout_timer() {
    timer_due_ = steady::time_point::max();
    const auto now = steady::now();
    std::vector<callback> expired;
    steady::time_point next = steady::time_point::max();
    {
      std::lock_guard lock(mutex_);
      const auto horizon = std::chrono::duration_cast<steady::duration>(min_timeout_);
      for (auto& e : pending_) {
        if (e.queued + horizon > now) {
          // Nothing queued after this one can have expired yet.
          next = std::min(next, e.queued + horizon);
          break;
        }
        if (!e.done) continue;
        if (e.deadline <= now)
          expired.push_back(std::move(e.done));
        else
          next = std::min(next, e.deadline);
      }
      next = std::min(next, new_min_deadline_);
    }
    for (auto& cb : expired) {
      stats_timeouts_.fetch_add(1, std::memory_order_relaxed);
      cb(redis_errc::timeout, redis_reply{});
    }
    if (next != steady::time_point::max()) arm_timeout(std::max(next, now + std::chrono::microseconds(200)));
  }

  bool is_closed() {
    std::lock_guard lock(mutex_);
    return closed_;
  }

  void close() {
    {
      std::lock_guard lock(mutex_);
      if (closed_) return;
      closed_ = true;
    }
    auto self = shared_from_this();
    asio::post(strand_, [self] {
      ++self->gen_;
      boost::system::error_code ignored;
      self->socket_.close(ignored);
      self->resolver_.cancel();
      self->timeout_timer_.cancel();
      self->retry_timer_.cancel();
      self->connect_timer_.cancel();
      const bool was_up = self->up_;
      self->up_ = false;
      self->up_flag_.store(false, std::memory_order_release);
      self->connecting_ = false;
      self->fail_all(redis_errc::closed, false);
      if (was_up) self->notify(false);
    });
  }

  asio::io_context& io_;
  asio::strand<asio::io_context::executor_type> strand_;
  tcp::socket socket_;
  tcp::resolver resolver_;
  asio::steady_timer timeout_timer_;
  asio::steady_timer retry_timer_;
  asio::steady_timer connect_timer_;
  redis_options opt_;
  std::mt19937 rng_;

  // Guarded by mutex_.
  std::mutex mutex_;
  std::string out_;            // encoded commands not yet handed to a write
  std::size_t unwritten_ = 0;  // how many commands out_ holds (the last ones of pending_)
  std::deque<entry> pending_;  // every command not yet answered by the server, in order
  bool kick_posted_ = false;
  bool down_ = false;  // fail new commands at once (a connection attempt failed or dropped)
  bool closed_ = false;
  duration min_timeout_;
  steady::time_point new_min_deadline_ = steady::time_point::max();
  state_callback on_state_;

  // Strand only.
  bool up_ = false;
  bool connecting_ = false;
  bool writing_ = false;
  unsigned gen_ = 0;  // bumped when a socket is abandoned: its late handlers do nothing
  int attempt_ = 0;
  steady::time_point timer_due_ = steady::time_point::max();
  redisReader* reader_ = nullptr;
  std::string wbuf_;
  std::array<char, 16384> rbuf_{};
  std::vector<std::pair<callback, redis_reply>> answered_;

  std::atomic<bool> up_flag_{false};
  std::atomic<std::uint64_t> stats_sent_{0}, stats_replies_{0}, stats_timeouts_{0}, stats_failed_{0},
      stats_connects_{0}, stats_disconnects_{0};
};

redis_connection::redis_connection(context& ctx, redis_options options)
    : redis_connection(ctx.io(), std::move(options)) {}

redis_connection::redis_connection(boost::asio::io_context& io, redis_options options)
    : impl_(std::make_shared<impl>(io, std::move(options))) {
  impl_->start();
}

redis_connection::~redis_connection() { impl_->close(); }

void redis_connection::command(std::vector<std::string> args, callback done) {
  impl_->command(args, impl_->opt_.command_timeout, std::move(done));
}

void redis_connection::command(std::vector<std::string> args, duration timeout, callback done) {
  impl_->command(args, timeout, std::move(done));
}

namespace {

struct command_awaiter {
  redis_connection::impl& conn;
  const std::vector<std::string>& args;
  duration timeout;
  std::error_code ec{};
  redis_reply reply{};

  bool await_ready() const noexcept { return false; }
  void await_suspend(std::coroutine_handle<> h);
  redis_reply await_resume() {
    if (ec) std::rethrow_exception(redis_failure(ec, "redis " + (args.empty() ? std::string() : args[0])));
    return std::move(reply);
  }
};

}  // namespace

void command_awaiter::await_suspend(std::coroutine_handle<> h) {
  asio::io_context* io = &conn.io_;
  conn.command(args, timeout, [this, h, io](std::error_code e, redis_reply r) {
    ec = e;
    reply = std::move(r);
    asio::post(*io, [h] { h.resume(); });
  });
}

// The awaiter is a named local, not a temporary inside co_return: GCC 12 mishandles temporaries
// of aggregate type with reference members in a co_await within co_return.
task<redis_reply> redis_connection::command(std::vector<std::string> args) {
  command_awaiter awaiter{*impl_, args, impl_->opt_.command_timeout};
  redis_reply r = co_await awaiter;
  co_return r;
}

task<redis_reply> redis_connection::command(std::vector<std::string> args, duration timeout) {
  command_awaiter awaiter{*impl_, args, timeout};
  redis_reply r = co_await awaiter;
  co_return r;
}

bool redis_connection::connected() const noexcept {
  std::lock_guard lock(impl_->mutex_);
  return impl_->up_flag_.load(std::memory_order_acquire);
}

void redis_connection::on_state(state_callback f) {
  std::lock_guard lock(impl_->mutex_);
  impl_->on_state_ = std::move(f);
}

redis_connection_stats redis_connection::stats() const noexcept {
  const auto& i = *impl_;
  return {i.stats_sent_.load(),   i.stats_replies_.load(),  i.stats_timeouts_.load(),
          i.stats_failed_.load(), i.stats_connects_.load(), i.stats_disconnects_.load()};
}

const redis_options& redis_connection::options() const noexcept { return impl_->opt_; }

boost::asio::io_context& redis_connection::io() const noexcept { return impl_->io_; }

void redis_connection::close() { impl_->close(); }

}  // namespace rc
