// The HTTP client behind rc::http: one call per exchange, as an rc::task.
//
// Beast's asynchronous operations are bridged to rc::task by `async_op`: the completion handler
// stores the results and resumes the coroutine, on the connection's strand (where Asio runs it).
// Every connection lives on its own strand (the io_context itself when the context runs one
// thread), so the call, its timeout and an abandonment (the exchange's abort signal) never touch
// the socket at the same time; stale timer and abort callbacks from an earlier call on a pooled
// connection are told apart by a generation number.
//
// HTTPS (an https:// URL): the connection is a TLS stream over the same socket. The endpoint's
// TLS context is made at its first https call (the system's CA store, or tls.ca_file); the
// handshake sends SNI and checks the certificate's names against the host (or
// tls.server_name). A handshake or verification failure is RC5010 naming the host and why.
// Pooled connections are keyed by scheme, host, port and TLS settings.
//
// Connections are kept per host in a context-wide pool (LIFO, at most pool_size idle per host,
// none older than pool_idle). A pooled connection the server has closed in the meantime fails
// before any response byte; an idempotent call then goes once more on a fresh connection.
#include <fmt/format.h>

#include <atomic>
#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>
#include <coroutine>
#include <mutex>
#include <tuple>
#include <unordered_map>

#include "http_internal.hpp"
#include "rc/context.hpp"
#include "rc/error.hpp"

namespace rc {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using tcp = asio::ip::tcp;
using steady = std::chrono::steady_clock;

namespace detail {

// An endpoint's TLS context, made once, at its first https call (any thread).
struct http_client_tls {
  std::once_flag once;
  std::optional<asio::ssl::context> context;
  std::exception_ptr failure;
  std::atomic<bool> warned{false};  // http_tls_unverified emitted

  asio::ssl::context& get(const tls_client& t) {
    std::call_once(once, [&] {
      try {
        asio::ssl::context c(asio::ssl::context::tls_client);
        SSL_CTX_set_min_proto_version(c.native_handle(), TLS1_2_VERSION);
        beast::error_code ec;
        if (t.ca_file.empty())
          c.set_default_verify_paths(ec);
        else
          c.load_verify_file(t.ca_file, ec);
        if (ec)
          invalid_option(
              "http", "tls.ca_file", "PEM CA certificates",
              fmt::format("\"{}\" ({})", t.ca_file.empty() ? "the system's store" : t.ca_file, ec.message()));
        c.set_verify_mode(t.verify ? asio::ssl::verify_peer : asio::ssl::verify_none);
        context.emplace(std::move(c));
      } catch (...) {
        failure = std::current_exception();
      }
    });
    if (failure) std::rethrow_exception(failure);
    return *context;
  }
};

}  // namespace detail

namespace {

// ---- Asio operation -> awaitable ---------------------------------------------------------------

template <class Initiate, class... Results>
class async_awaiter {
 public:
  explicit async_awaiter(Initiate init) : init_(std::move(init)) {}
  bool await_ready() const noexcept { return false; }
  void await_suspend(std::coroutine_handle<> h) {
    init_([this, h](Results... r) mutable {
      result_.emplace(std::move(r)...);
      h.resume();
    });
  }
  std::tuple<Results...> await_resume() { return std::move(*result_); }

 private:
  Initiate init_;
  std::optional<std::tuple<Results...>> result_;
};

/// `co_await async_op<error_code, std::size_t>([&](auto handler) { async_x(..., std::move(handler)); })`
template <class... Results, class Initiate>
async_awaiter<Initiate, Results...> async_op(Initiate init) {
  return async_awaiter<Initiate, Results...>(std::move(init));
}

// ---- connections and the pool ------------------------------------------------------------------

struct client_connection {
  client_connection(context& ctx, asio::ssl::context* tls_context)
      : socket(ctx.threads() > 1 ? asio::any_io_executor(asio::make_strand(ctx.io()))
                                 : asio::any_io_executor(ctx.io().get_executor())),
        timer(socket.get_executor()) {
    if (tls_context) tls.emplace(socket, *tls_context);
  }
  tcp::socket socket;
  std::optional<asio::ssl::stream<tcp::socket&>> tls;  // over `socket`, for https
  std::string verify_failure;                          // why the peer's certificate was refused
  asio::steady_timer timer;
  beast::flat_buffer buffer;
  steady::time_point idle_since{};
  std::uint64_t generation = 0;
  bool timed_out = false;
  bool abandoned = false;
  bool reused = false;

  void close() {
    beast::error_code ignored;
    socket.close(ignored);
  }
};

class client_pool {
 public:
  explicit client_pool(context&) {}

  std::shared_ptr<client_connection> checkout(const std::string& key, duration max_idle) {
    std::vector<std::shared_ptr<client_connection>> stale;
    std::shared_ptr<client_connection> found;
    {
      std::lock_guard lock(mutex_);
      auto it = idle_.find(key);
      if (it == idle_.end()) return nullptr;
      auto& list = it->second;
      const auto oldest = steady::now() - max_idle;
      while (!list.empty()) {
        auto c = std::move(list.back());
        list.pop_back();
        if (c->idle_since >= oldest) {
          found = std::move(c);
          break;
        }
        stale.push_back(std::move(c));
      }
      // What is left is older still (LIFO): drop it too.
      for (auto& c : list) stale.push_back(std::move(c));
      list.clear();
    }
    for (auto& c : stale) asio::post(c->socket.get_executor(), [c] { c->close(); });
    return found;
  }

  void checkin(const std::string& key, std::shared_ptr<client_connection> c, std::size_t max_idle) {
    std::lock_guard lock(mutex_);
    auto& list = idle_[key];
    if (list.size() >= max_idle) return;  // dropping the last reference closes it
    list.push_back(std::move(c));
  }

 private:
  std::mutex mutex_;
  std::unordered_map<std::string, std::vector<std::shared_ptr<client_connection>>> idle_;
};

bool idempotent(std::string_view m) {
  return m == "GET" || m == "HEAD" || m == "PUT" || m == "DELETE" || m == "OPTIONS" || m == "TRACE";
}

bool bodiless(std::string_view m) { return m == "GET" || m == "HEAD" || m == "DELETE" || m == "OPTIONS"; }

// The request body and its content type, from the options or the exchange's body.
std::pair<std::optional<std::string>, std::string> request_body(const http_options& o, const exchange& ex) {
  if (o.body) return {o.body(ex), o.content_type.empty() ? "text/plain; charset=utf-8" : o.content_type};
  if (bodiless(o.method)) return {std::nullopt, {}};
  const any_body& b = ex.raw_body();
  auto ct = [&](std::string_view fallback) { return o.content_type.empty() ? std::string(fallback) : o.content_type; };
  if (b.holds<std::string>()) return {b.get<std::string>(), ct("text/plain; charset=utf-8")};
  if (b.holds<http_request>()) {
    const auto& r = b.get<http_request>();
    const auto* c = r.header("Content-Type");
    return {r.body, ct(c ? std::string_view(*c) : "application/octet-stream")};
  }
  if (b.holds<http_response>()) {
    const auto& r = b.get<http_response>();
    if (r.body.empty() && r.json)
      return {r.json->dump(-1, ' ', false, nlohmann::json::error_handler_t::replace), ct("application/json")};
    return {r.body, ct(r.content_type.empty() ? "text/plain; charset=utf-8" : r.content_type)};
  }
  nlohmann::json j = b.holds<nlohmann::json>() ? b.get<nlohmann::json>() : b.to_json();
  if (j.is_null() && !b.holds<nlohmann::json>()) return {std::nullopt, {}};
  return {j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace), ct("application/json")};
}

error call_error(errc code, std::string message, bool retryable, const std::string& method, const std::string& url) {
  return error(code, std::move(message), retryable, nullptr, {{"url", url}, {"method", method}});
}

// Why a handshake failed, in words: the certificate check that refused the peer, else OpenSSL's.
std::string tls_failure_reason(client_connection& c, beast::error_code ec) {
  if (!c.verify_failure.empty()) return "certificate verification failed: " + c.verify_failure;
  if (ec.category() == asio::error::get_ssl_category()) {
    const long result = SSL_get_verify_result(c.tls->native_handle());
    if (result != X509_V_OK)
      return fmt::format("certificate verification failed: {}", X509_verify_cert_error_string(result));
  }
  return ec.message();
}

task<http_response> perform(context& ctx, std::shared_ptr<const http_options> options,
                            std::shared_ptr<detail::http_client_tls> tls_state, exchange& ex, route_runtime& rt) {
  const http_options& o = *options;
  const std::string url = o.url_from ? o.url_from(ex) : o.url;
  const http_detail::url_parts u = http_detail::parse_url(url);
  asio::ssl::context* tls_context = nullptr;
  const std::string& tls_name = o.tls.server_name.empty() ? u.host : o.tls.server_name;
  if (u.tls) {
    tls_context = &tls_state->get(o.tls);
    if (!o.tls.verify && !tls_state->warned.exchange(true))
      ctx.events().emit(http_tls_unverified, [&] {
        return nlohmann::json{{"level", "warn"},
                              {"url", url},
                              {"message", "tls.verify is false: the server's certificate is not checked"}};
      });
  }

  steady::time_point deadline = steady::now() + o.timeout;
  if (ex.deadline()) {
    const duration left = *ex.deadline() - rt.now();
    if (left <= duration::zero())
      throw call_error(errc::timed_out,
                       fmt::format("http: {} {} not sent: the exchange's deadline has passed", o.method, url), false,
                       o.method, url);
    deadline = std::min(deadline, steady::now() + std::chrono::duration_cast<steady::duration>(left));
  }
  if (ex.abort_signal() && ex.abort_signal()->fired())
    throw call_error(errc::step_failed, fmt::format("http: {} {} not sent: the caller went away", o.method, url), false,
                     o.method, url);

  bhttp::request<bhttp::string_body> req;
  req.method_string(o.method);
  req.target(u.target);
  req.version(11);
  req.set(bhttp::field::host, u.host_header);
  req.set(bhttp::field::user_agent, "routecraft");
  for (const auto& [k, v] : o.headers) req.set(k, v);
  auto [body, content_type] = request_body(o, ex);
  if (body) {
    if (!req.count(bhttp::field::content_type)) req.set(bhttp::field::content_type, content_type);
    req.body() = std::move(*body);
  }
  req.keep_alive(true);
  req.prepare_payload();

  const std::string key =
      u.tls ? fmt::format("https://{}:{}|{}|{}|{}", u.host, u.port, tls_name, o.tls.verify, o.tls.ca_file)
            : u.host + ":" + std::to_string(u.port);
  auto& pool = ctx.service<client_pool>();
  const bool head = o.method == "HEAD";

  for (int attempt = 0;; ++attempt) {
    std::shared_ptr<client_connection> c = attempt == 0 ? pool.checkout(key, o.pool_idle) : nullptr;
    const bool fresh = !c;
    if (fresh) c = std::make_shared<client_connection>(ctx, tls_context);
    // From here on everything happens on the connection's strand.
    co_await async_op<>([&](auto h) { asio::post(c->socket.get_executor(), std::move(h)); });
    const std::uint64_t generation = ++c->generation;
    c->timed_out = false;
    c->abandoned = false;
    c->timer.expires_at(deadline);
    c->timer.async_wait([c, generation](beast::error_code ec) {
      if (ec || c->generation != generation) return;
      c->timed_out = true;
      c->close();
    });
    if (auto* signal = ex.abort_signal()) {
      signal->on_fire([weak = std::weak_ptr<client_connection>(c), generation] {
        auto conn = weak.lock();
        if (!conn) return;
        asio::post(conn->socket.get_executor(), [conn, generation] {
          if (conn->generation != generation) return;
          conn->abandoned = true;
          conn->close();
        });
      });
    }
    auto fail = [&](beast::error_code ec, std::string_view what) -> error {
      ++c->generation;
      c->timer.cancel();
      c->close();
      if (c->timed_out)
        return call_error(errc::timed_out,
                          fmt::format("http: {} {} timed out after {}", o.method, url, ms_text(o.timeout)), true,
                          o.method, url);
      if (c->abandoned)
        return call_error(errc::step_failed, fmt::format("http: {} {} abandoned: the caller went away", o.method, url),
                          false, o.method, url);
      return call_error(errc::connection_failed,
                        fmt::format("http: {} {} failed to {}: {}", o.method, url, what, ec.message()), true, o.method,
                        url);
    };

    if (fresh) {
      std::vector<tcp::endpoint> endpoints;
      if (const auto ip = http_detail::parse_ip(u.host)) {
        endpoints.emplace_back(asio::ip::make_address(http_detail::format_ip(*ip)), u.port);
      } else {
        tcp::resolver resolver(c->socket.get_executor());
        auto [ec, results] = co_await async_op<beast::error_code, tcp::resolver::results_type>(
            [&](auto h) { resolver.async_resolve(u.host, std::to_string(u.port), std::move(h)); });
        if (ec) throw fail(ec, "resolve the host");
        for (const auto& r : results) endpoints.push_back(r.endpoint());
      }
      auto [ec, connected] = co_await async_op<beast::error_code, tcp::endpoint>(
          [&](auto h) { asio::async_connect(c->socket, endpoints, std::move(h)); });
      if (ec) throw fail(ec, "connect");
      beast::error_code ignored;
      c->socket.set_option(tcp::no_delay(true), ignored);
      if (c->tls) {
        auto& stream = *c->tls;
        // SNI carries names only, never an address.
        if (!http_detail::parse_ip(tls_name)) SSL_set_tlsext_host_name(stream.native_handle(), tls_name.c_str());
        if (o.tls.verify)
          stream.set_verify_callback([c = c.get(), check = asio::ssl::host_name_verification(tls_name),
                                      name = tls_name](bool preverified, asio::ssl::verify_context& vc) {
            X509_STORE_CTX* store = vc.native_handle();
            if (!preverified) {
              if (c->verify_failure.empty())
                c->verify_failure = X509_verify_cert_error_string(X509_STORE_CTX_get_error(store));
              return false;
            }
            if (!check(preverified, vc)) {
              c->verify_failure = fmt::format("the certificate is not valid for the name \"{}\"", name);
              return false;
            }
            return true;
          });
        auto [hec] = co_await async_op<beast::error_code>(
            [&](auto h) { stream.async_handshake(asio::ssl::stream_base::client, std::move(h)); });
        if (hec) {
          if (c->timed_out || c->abandoned) throw fail(hec, "handshake");
          const std::string reason = tls_failure_reason(*c, hec);
          // A refused certificate stays refused: retrying cannot help.
          const bool retryable = c->verify_failure.empty() && reason.find("certificate") == std::string::npos;
          (void)fail(hec, "handshake");
          throw call_error(
              errc::connection_failed,
              fmt::format("http: {} {} failed: TLS handshake with {} failed: {}", o.method, url, tls_name, reason),
              retryable, o.method, url);
        }
      }
    }

    auto [wec, written] = co_await async_op<beast::error_code, std::size_t>([&](auto h) {
      if (c->tls)
        bhttp::async_write(*c->tls, req, std::move(h));
      else
        bhttp::async_write(c->socket, req, std::move(h));
    });
    if (wec) {
      const bool again = !fresh && attempt == 0 && idempotent(o.method) && !c->timed_out && !c->abandoned;
      error e = fail(wec, "send the request");
      if (again) continue;
      throw e;
    }

    bhttp::response_parser<bhttp::string_body> parser;
    parser.body_limit(o.max_response_bytes);
    if (head) parser.skip(true);
    auto [rec, read] = co_await async_op<beast::error_code, std::size_t>([&](auto h) {
      if (c->tls)
        bhttp::async_read(*c->tls, c->buffer, parser, std::move(h));
      else
        bhttp::async_read(c->socket, c->buffer, parser, std::move(h));
    });
    if (rec) {
      if (rec == bhttp::error::body_limit) {
        (void)fail(rec, "read the response");
        throw call_error(errc::step_failed,
                         fmt::format("http: {} {}: the response exceeds max_response_bytes ({})", o.method, url,
                                     o.max_response_bytes),
                         false, o.method, url);
      }
      const bool again =
          !fresh && attempt == 0 && idempotent(o.method) && !parser.got_some() && !c->timed_out && !c->abandoned;
      error e = fail(rec, "read the response");
      if (again) continue;
      throw e;
    }
    ++c->generation;  // the timer and abort callbacks of this call are stale from now on
    c->timer.cancel();

    auto res = parser.release();
    http_response out;
    out.status = static_cast<int>(res.result_int());
    out.url = url;
    for (const auto& f : res)
      out.headers.emplace_back(std::string(f.name_string().data(), f.name_string().size()),
                               std::string(f.value().data(), f.value().size()));
    if (const auto* ct = out.header("Content-Type")) out.content_type = *ct;
    out.body = std::move(res.body());
    if (!out.body.empty() && http_detail::is_json_content_type(out.content_type)) {
      auto j = nlohmann::json::parse(out.body, nullptr, false);
      if (!j.is_discarded()) out.json = std::move(j);
    }
    if (res.keep_alive() && c->buffer.size() == 0) {
      c->reused = true;
      c->idle_since = steady::now();
      pool.checkin(key, std::move(c), o.pool_size);
    } else {
      c->close();
    }

    if (o.throw_on_http_error && (out.status < 200 || out.status > 299)) {
      const bool retryable = out.status >= 500 || out.status == 429;
      nlohmann::json details = {{"status", out.status}, {"url", url}, {"method", o.method}};
      if (out.status == 429 || out.status == 503)
        if (const auto* ra = out.header("Retry-After"))
          if (auto ms = http_detail::parse_retry_after(*ra, http_detail::wall_now_ms()))
            details["retry_after_ms"] = *ms;
      throw error(
          errc::step_failed,
          fmt::format("http: {} {} answered {} {}", o.method, url, out.status, http_detail::reason_phrase(out.status)),
          retryable, nullptr, std::move(details));
    }
    co_return out;
  }
}

}  // namespace

http_client_endpoint::http_client_endpoint(http_options options)
    : options_(std::make_shared<const http_options>(std::move(options))),
      tls_(std::make_shared<detail::http_client_tls>()) {
  options_->validate();
}

task<void> http_client_endpoint::send(exchange& ex, route_runtime& rt) {
  (void)co_await perform(rt.ctx(), options_, tls_, ex, rt);
}

task<exchange> http_client_endpoint::call(exchange& ex, route_runtime& rt) {
  exchange reply;
  reply.set_body(co_await perform(rt.ctx(), options_, tls_, ex, rt));
  co_return reply;
}

}  // namespace rc
