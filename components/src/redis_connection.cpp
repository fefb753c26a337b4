#include <hiredis/hiredis.h>

#include <array>
#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/write.hpp>
#include <deque>

#include "rc/context.hpp"
#include "rc/error.hpp"
#include "rc/redis.hpp"

namespace rc {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

namespace {

class redis_category_impl final : public std::error_category {
 public:
  const char* name() const noexcept override { return "redis"; }
  std::string message(int c) const override {
    switch (static_cast<redis_errc>(c)) {
      case redis_errc::timeout:
        return "timed out";
      case redis_errc::disconnected:
        return "disconnected";
      case redis_errc::closed:
        return "connection closed";
      case redis_errc::protocol:
        return "protocol error";
    }
    return "unknown";
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

void encode(std::string& out, const std::vector<std::string>& args) {
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
  if (is_string()) {
    try {
      std::size_t used = 0;
      const long long v = std::stoll(str, &used);
      if (used == str.size()) return v;
    } catch (const std::exception&) {
    }
  }
  throw error(errc::step_failed, "redis: the reply is not an integer");
}

std::exception_ptr redis_failure(std::error_code ec, std::string_view what) {
  const bool timeout = ec == redis_errc::timeout;
  return std::make_exception_ptr(
      error(timeout ? errc::timed_out : errc::connection_failed, std::string(what) + ": " + ec.message(), true));
}

// All state lives on one strand: commands are queued, written and answered there.
struct redis_connection::impl : std::enable_shared_from_this<impl> {
  struct pending {
    callback done;  // empty once answered (a timeout answers early; the late reply is discarded)
    std::unique_ptr<asio::steady_timer> timer;
  };

  impl(asio::io_context& io, redis_options o)
      : io_(io), strand_(asio::make_strand(io)), socket_(strand_), opt_(std::move(o)) {}
  ~impl() {
    if (reader_) redisReaderFree(reader_);
  }

  asio::io_context& io_;
  asio::strand<asio::io_context::executor_type> strand_;
  tcp::socket socket_;
  redis_options opt_;
  enum class state { down, connecting, up, closed } state_ = state::down;
  std::deque<pending> sent_;        // written (or being written), awaiting replies in order
  std::deque<std::string> unsent_;  // encoded commands waiting for the connection
  std::deque<pending> waiting_;     // their callbacks
  std::string out_;
  bool writing_ = false;
  unsigned generation_ = 0;  // of the socket: handlers of a dropped one are ignored
  redisReader* reader_ = nullptr;
  std::array<char, 16 * 1024> in_{};

  static void answer(callback& cb, std::error_code ec, redis_reply r) {
    if (!cb) return;
    auto f = std::move(cb);
    cb = nullptr;
    f(ec, std::move(r));
  }

  void submit(std::vector<std::string> args, duration timeout, callback done) {
    std::string wire;
    encode(wire, args);
    asio::dispatch(strand_,
                   [self = shared_from_this(), wire = std::move(wire), timeout, done = std::move(done)]() mutable {
                     if (self->state_ == state::closed) {
                       answer(done, redis_errc::closed, {});
                       return;
                     }
                     pending p{std::move(done), std::make_unique<asio::steady_timer>(self->strand_, timeout)};
                     self->arm(p);
                     if (self->state_ == state::up) {
                       self->out_ += wire;
                       self->sent_.push_back(std::move(p));
                       self->flush();
                     } else {
                       self->unsent_.push_back(std::move(wire));
                       self->waiting_.push_back(std::move(p));
                       if (self->state_ == state::down) self->connect();
                     }
                   });
  }

  void arm(pending& p) {
    // The timer finds its command by the timer's address: deques keep elements in place on
    // push_back / pop_front, and a pending entry is only ever removed from the front.
    asio::steady_timer* t = p.timer.get();
    t->async_wait([self = shared_from_this(), t](const boost::system::error_code& ec) {
      if (ec) return;  // cancelled: answered
      for (auto* q : {&self->sent_, &self->waiting_})
        for (auto& e : *q)
          if (e.timer.get() == t) answer(e.done, redis_errc::timeout, {});
    });
  }

  void connect() {
    state_ = state::connecting;
    ++generation_;
    auto resolver = std::make_shared<tcp::resolver>(strand_);
    resolver->async_resolve(opt_.host, std::to_string(opt_.port),
                            [self = shared_from_this(), resolver](const boost::system::error_code& ec,
                                                                  const tcp::resolver::results_type& results) {
                              if (self->state_ != state::connecting) return;
                              if (ec) return self->fail(redis_errc::disconnected);
                              asio::async_connect(self->socket_, results,
                                                  [self](const boost::system::error_code& ec2, const tcp::endpoint&) {
                                                    if (self->state_ != state::connecting) return;
                                                    if (ec2) return self->fail(redis_errc::disconnected);
                                                    self->connected();
                                                  });
                            });
  }

  void connected() {
    state_ = state::up;
    if (reader_) redisReaderFree(reader_);
    reader_ = redisReaderCreate();
    while (!unsent_.empty()) {
      out_ += unsent_.front();
      unsent_.pop_front();
      sent_.push_back(std::move(waiting_.front()));
      waiting_.pop_front();
    }
    flush();
    read();
  }

  void flush() {
    if (writing_ || out_.empty() || state_ != state::up) return;
    writing_ = true;
    auto buf = std::make_shared<std::string>(std::move(out_));
    out_.clear();
    asio::async_write(
        socket_, asio::buffer(*buf),
        [self = shared_from_this(), buf, gen = generation_](const boost::system::error_code& ec, std::size_t) {
          if (gen != self->generation_) return;
          self->writing_ = false;
          if (ec) return self->fail(redis_errc::disconnected);
          self->flush();
        });
  }

  void read() {
    socket_.async_read_some(asio::buffer(in_), [self = shared_from_this(), gen = generation_](
                                                   const boost::system::error_code& ec, std::size_t n) {
      if (gen != self->generation_ || self->state_ != state::up) return;
      if (ec) return self->fail(redis_errc::disconnected);
      if (redisReaderFeed(self->reader_, self->in_.data(), n) != REDIS_OK) return self->fail(redis_errc::protocol);
      for (;;) {
        void* raw = nullptr;
        if (redisReaderGetReply(self->reader_, &raw) != REDIS_OK) return self->fail(redis_errc::protocol);
        if (!raw) break;
        redis_reply r = convert(static_cast<redisReply*>(raw));
        freeReplyObject(raw);
        if (self->sent_.empty()) return self->fail(redis_errc::protocol);
        pending p = std::move(self->sent_.front());
        self->sent_.pop_front();
        p.timer->cancel();
        answer(p.done, {}, std::move(r));
      }
      self->read();
    });
  }

  /// The connection failed or dropped: what waited on it fails; the next command reconnects.
  void fail(redis_errc why) {
    if (state_ == state::closed) return;
    boost::system::error_code ignored;
    socket_.close(ignored);
    ++generation_;
    state_ = state::down;
    writing_ = false;
    out_.clear();
    unsent_.clear();
    auto sent = std::move(sent_);
    auto waiting = std::move(waiting_);
    sent_.clear();
    waiting_.clear();
    for (auto* q : {&sent, &waiting})
      for (auto& p : *q) {
        p.timer->cancel();
        answer(p.done, why, {});
      }
  }

  void close() {
    asio::dispatch(strand_, [self = shared_from_this()] {
      self->fail(redis_errc::closed);
      self->state_ = state::closed;
    });
  }
};

redis_connection::redis_connection(context& ctx, redis_options options)
    : redis_connection(ctx.io(), std::move(options)) {}
redis_connection::redis_connection(asio::io_context& io, redis_options options)
    : impl_(std::make_shared<impl>(io, std::move(options))) {}
redis_connection::~redis_connection() { close(); }

void redis_connection::command(std::vector<std::string> args, callback done) {
  impl_->submit(std::move(args), impl_->opt_.command_timeout, std::move(done));
}
void redis_connection::command(std::vector<std::string> args, duration timeout, callback done) {
  impl_->submit(std::move(args), timeout, std::move(done));
}

namespace {

// Kept in a named variable by the caller: g++ 12 mishandles a temporary awaiter with
// non-trivial members (a std::string freed twice).
struct command_awaiter {
  redis_connection::impl& conn;
  std::vector<std::string> args;
  duration timeout;
  std::string what{};  // the command's name, for the failure's message
  std::error_code ec{};
  redis_reply reply{};

  bool await_ready() const noexcept { return false; }
  void await_suspend(std::coroutine_handle<> h) {
    // Nothing of `this` is touched after submit: the reply may resume the caller at once.
    what = "redis " + (args.empty() ? std::string() : args.front());
    asio::io_context& io = conn.io_;
    conn.submit(std::move(args), timeout, [this, h, &io](std::error_code e, redis_reply r) {
      ec = e;
      reply = std::move(r);
      asio::post(io, [h] { h.resume(); });
    });
  }
  redis_reply await_resume() {
    if (ec) std::rethrow_exception(redis_failure(ec, what));
    return std::move(reply);
  }
};

}  // namespace

task<redis_reply> redis_connection::command(std::vector<std::string> args) {
  command_awaiter awaiter{*impl_, std::move(args), impl_->opt_.command_timeout};
  co_return co_await awaiter;
}
task<redis_reply> redis_connection::command(std::vector<std::string> args, duration timeout) {
  command_awaiter awaiter{*impl_, std::move(args), timeout};
  co_return co_await awaiter;
}

const redis_options& redis_connection::options() const noexcept { return impl_->opt_; }
void redis_connection::close() { impl_->close(); }

}  // namespace rc
