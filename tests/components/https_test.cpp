// HTTPS: rc::http_source with a certificate and rc::http over TLS, on 127.0.0.1 with ephemeral
// ports, in real time. The certificates are made at test time with OpenSSL's C API, in a temp
// directory: a CA, a server certificate it signs for "localhost" and 127.0.0.1, and an expired
// one; a failure to make them fails the tests. Every wait is bounded.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <rc/rc.hpp>
#include <stdexcept>
#include <string>
#include <thread>

#include "support/dsl_support.hpp"

namespace https_test {

using namespace std::chrono_literals;
using rc::test::event_recorder;

namespace {

using clock_type = std::chrono::steady_clock;

// ---- certificates -------------------------------------------------------------------------------

struct x509_deleter {
  void operator()(X509* x) const { X509_free(x); }
};
struct key_deleter {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
using cert_ptr = std::unique_ptr<X509, x509_deleter>;
using key_ptr = std::unique_ptr<EVP_PKEY, key_deleter>;

void check(bool ok, const char* what) {
  if (!ok) throw std::runtime_error(std::string("https_test: cannot make the test certificates: ") + what);
}

void add_extension(X509* cert, X509* issuer, int nid, const char* value) {
  X509V3_CTX v3;
  X509V3_set_ctx(&v3, issuer, cert, nullptr, nullptr, 0);
  X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &v3, nid, value);
  check(ext != nullptr, "an extension");
  check(X509_add_ext(cert, ext, -1) == 1, "adding an extension");
  X509_EXTENSION_free(ext);
}

// A certificate for `cn`, valid from now + not_before to now + not_after (seconds), signed by
// the issuer (self-signed when there is none).
std::pair<cert_ptr, key_ptr> make_cert(const char* cn, const char* san, X509* issuer, EVP_PKEY* issuer_key,
                                       long not_before, long not_after, long serial) {
  key_ptr key(EVP_EC_gen("P-256"));
  check(key != nullptr, "an EC key");
  cert_ptr cert(X509_new());
  check(cert != nullptr, "X509_new");
  X509_set_version(cert.get(), 2);
  ASN1_INTEGER_set(X509_get_serialNumber(cert.get()), serial);
  X509_gmtime_adj(X509_getm_notBefore(cert.get()), not_before);
  X509_gmtime_adj(X509_getm_notAfter(cert.get()), not_after);
  X509_set_pubkey(cert.get(), key.get());
  X509_NAME* name = X509_get_subject_name(cert.get());
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, reinterpret_cast<const unsigned char*>(cn), -1, -1, 0);
  X509_set_issuer_name(cert.get(), issuer ? X509_get_subject_name(issuer) : name);
  X509* signer = issuer ? issuer : cert.get();
  if (san) {
    add_extension(cert.get(), signer, NID_basic_constraints, "critical,CA:FALSE");
    add_extension(cert.get(), signer, NID_subject_alt_name, san);
  } else {
    add_extension(cert.get(), signer, NID_basic_constraints, "critical,CA:TRUE");
    add_extension(cert.get(), signer, NID_key_usage, "critical,keyCertSign,cRLSign");
  }
  check(X509_sign(cert.get(), issuer_key ? issuer_key : key.get(), EVP_sha256()) > 0, "signing");
  return {std::move(cert), std::move(key)};
}

void write_pem(const std::string& path, X509* cert, EVP_PKEY* key) {
  std::FILE* f = std::fopen(path.c_str(), "w");
  check(f != nullptr, path.c_str());
  const bool ok =
      cert ? PEM_write_X509(f, cert) == 1 : PEM_write_PrivateKey(f, key, nullptr, nullptr, 0, nullptr, nullptr) == 1;
  std::fclose(f);
  check(ok, path.c_str());
}

struct test_pki {
  std::string dir;
  std::string ca;                     // the CA's certificate
  std::string cert, key;              // "localhost", 127.0.0.1, signed by the CA, valid now
  std::string expired, expired_key;   // the same names, expired yesterday
  std::string self_signed, self_key;  // "localhost", signed by itself

  test_pki() = default;
  test_pki(test_pki&&) = default;
  ~test_pki() {
    std::error_code ec;
    if (!dir.empty()) std::filesystem::remove_all(dir, ec);
  }
};

const test_pki& pki() {
  static const test_pki made = [] {
    test_pki p;
    char tmpl[] = "/tmp/rc-https-XXXXXX";
    check(::mkdtemp(tmpl) != nullptr, "mkdtemp");
    p.dir = tmpl;
    constexpr long day = 24 * 3600;
    auto [ca, ca_key] = make_cert("routecraft test CA", nullptr, nullptr, nullptr, -day, day, 1);
    auto [leaf, leaf_key] = make_cert("localhost", "DNS:localhost,IP:127.0.0.1", ca.get(), ca_key.get(), -day, day, 2);
    auto [old, old_key] =
        make_cert("localhost", "DNS:localhost,IP:127.0.0.1", ca.get(), ca_key.get(), -3 * day, -day, 3);
    auto [self, self_key] = make_cert("localhost", "DNS:localhost,IP:127.0.0.1", nullptr, nullptr, -day, day, 4);
    p.ca = p.dir + "/ca.pem";
    p.cert = p.dir + "/server.pem";
    p.key = p.dir + "/server.key";
    p.expired = p.dir + "/expired.pem";
    p.expired_key = p.dir + "/expired.key";
    p.self_signed = p.dir + "/self.pem";
    p.self_key = p.dir + "/self.key";
    write_pem(p.ca, ca.get(), nullptr);
    write_pem(p.cert, leaf.get(), nullptr);
    write_pem(p.key, nullptr, leaf_key.get());
    write_pem(p.expired, old.get(), nullptr);
    write_pem(p.expired_key, nullptr, old_key.get());
    write_pem(p.self_signed, self.get(), nullptr);
    write_pem(p.self_key, nullptr, self_key.get());
    return p;
  }();
  return made;
}

// ---- helpers ------------------------------------------------------------------------------------

rc::context_options quick_stop() { return {.shutdown_timeout = 3s}; }

struct running {
  rc::context& ctx;
  explicit running(rc::context& c) : ctx(c) { ctx.start(); }
  ~running() { ctx.stop(); }
};

double elapsed_ms(clock_type::time_point since) {
  return std::chrono::duration<double, std::milli>(clock_type::now() - since).count();
}

/// A TLS server answering GET /hello with "hello over TLS".
rc::http_source_endpoint hello_server(rc::context& ctx, const std::string& cert, const std::string& key,
                                      rc::http_server_options server = {}) {
  auto src = rc::http_source({.path = "/hello", .server = std::move(server), .tls = rc::tls_server{cert, key}});
  ctx.add(rc::craft().id("hello").from(src).transform([](rc::http_request) { return std::string("hello over TLS"); }));
  return src;
}

struct call_result {
  std::vector<rc::http_response> responses;
  std::vector<nlohmann::json> errors;  // route:exchange:failed details' "error"
};

/// Calls `options` `times` times from a route and waits for the calls.
call_result call(rc::context& ctx, rc::http_options options, int times = 1) {
  static int n = 0;
  event_recorder failed(ctx, "route:exchange:failed");
  rc::spy<rc::http_response> out;
  const std::string id = "caller-" + std::to_string(++n);
  ctx.add(rc::craft()
              .id(id)
              .from(rc::sequence(std::vector<int>(static_cast<std::size_t>(times), 0)))
              .request<rc::http_response>(rc::http(std::move(options)))
              .to(out));
  ctx.drain();
  call_result r;
  r.responses = out.bodies();
  for (const auto& e : failed.named("route:exchange:failed")) r.errors.push_back(e.details["error"]);
  return r;
}

/// A plain TCP connection to 127.0.0.1:port.
class raw_socket {
 public:
  explicit raw_socket(std::uint16_t port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    ::inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    connected_ = fd_ >= 0 && ::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  }
  ~raw_socket() {
    if (fd_ >= 0) ::close(fd_);
  }
  bool connected() const { return connected_; }
  void send(std::string_view data) { (void)::send(fd_, data.data(), data.size(), MSG_NOSIGNAL); }
  /// Reads until the peer closes; false if it has not within `timeout`. `got`: what came.
  bool closed_within(std::chrono::milliseconds timeout, std::string& got) {
    const auto until = clock_type::now() + timeout;
    for (;;) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - clock_type::now()).count();
      if (left <= 0) return false;
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left)) <= 0) return false;
      char chunk[4096];
      const auto n = ::recv(fd_, chunk, sizeof chunk, 0);
      if (n <= 0) return true;
      got.append(chunk, static_cast<std::size_t>(n));
    }
  }

 private:
  int fd_ = -1;
  bool connected_ = false;
};

/// A handshake with the server from a client limited to TLS `version` (security level 0, so that
/// our own OpenSSL allows the old versions); the error, empty on success.
std::string handshake_with(std::uint16_t port, int version) {
  namespace asio = boost::asio;
  asio::io_context io;
  asio::ssl::context c(asio::ssl::context::tls_client);
  SSL_CTX_set_security_level(c.native_handle(), 0);
  SSL_CTX_set_min_proto_version(c.native_handle(), version);
  SSL_CTX_set_max_proto_version(c.native_handle(), version);
  SSL_CTX_set_cipher_list(c.native_handle(), "DEFAULT@SECLEVEL=0");
  c.set_verify_mode(asio::ssl::verify_none);
  asio::ssl::stream<asio::ip::tcp::socket> s(io, c);
  boost::system::error_code ec;
  s.lowest_layer().connect({asio::ip::make_address("127.0.0.1"), port}, ec);
  if (ec) return "connect: " + ec.message();
  s.handshake(asio::ssl::stream_base::client, ec);
  return ec ? ec.message() : std::string();
}

bool contains(const std::string& text, std::string_view part) { return text.find(part) != std::string::npos; }

}  // namespace

// ---- a good handshake ---------------------------------------------------------------------------

TEST_CASE("https: rc::http calls an rc::http_source over TLS, verifying it against tls.ca_file") {
  rc::context ctx(quick_stop());
  auto src = hello_server(ctx, pki().cert, pki().key);
  running run(ctx);
  const auto r =
      call(ctx, {.url = fmt::format("https://localhost:{}/hello", src.port()), .tls = {.ca_file = pki().ca}}, 3);
  REQUIRE(r.errors.empty());
  REQUIRE(r.responses.size() == 3);
  for (const auto& res : r.responses) {
    CHECK(res.status == 200);
    CHECK(res.body == "hello over TLS");
  }
  // An address verified against the certificate's IP entry works too.
  const auto by_ip =
      call(ctx, {.url = fmt::format("https://127.0.0.1:{}/hello", src.port()), .tls = {.ca_file = pki().ca}});
  REQUIRE(by_ip.errors.empty());
  REQUIRE(by_ip.responses.size() == 1);
  CHECK(by_ip.responses[0].body == "hello over TLS");
}

TEST_CASE("https: the server accepts TLS 1.2 and refuses a TLS 1.1 client") {
  rc::context ctx(quick_stop());
  auto src = hello_server(ctx, pki().cert, pki().key);
  running run(ctx);
  CHECK(handshake_with(src.port(), TLS1_2_VERSION).empty());
  CHECK_FALSE(handshake_with(src.port(), TLS1_1_VERSION).empty());
}

// ---- what a client gets for each failure --------------------------------------------------------

TEST_CASE("https: a certificate for another name is RC5010, naming the host and the verification failure") {
  rc::context ctx(quick_stop());
  auto src = hello_server(ctx, pki().cert, pki().key);
  running run(ctx);
  const auto r = call(ctx, {.url = fmt::format("https://127.0.0.1:{}/hello", src.port()),
                            .tls = {.ca_file = pki().ca, .server_name = "api.example.test"}});
  CHECK(r.responses.empty());
  REQUIRE(r.errors.size() == 1);
  CHECK(r.errors[0]["code"] == "RC5010");
  CHECK(r.errors[0]["retryable"] == false);
  const std::string message = r.errors[0]["message"];
  CHECK(contains(message, "api.example.test"));
  CHECK(contains(message, "verification failed"));
}

TEST_CASE("https: an expired certificate is RC5010 saying it has expired") {
  rc::context ctx(quick_stop());
  auto src = hello_server(ctx, pki().expired, pki().expired_key);
  running run(ctx);
  const auto r =
      call(ctx, {.url = fmt::format("https://localhost:{}/hello", src.port()), .tls = {.ca_file = pki().ca}});
  CHECK(r.responses.empty());
  REQUIRE(r.errors.size() == 1);
  CHECK(r.errors[0]["code"] == "RC5010");
  const std::string message = r.errors[0]["message"];
  CHECK(contains(message, "localhost"));
  CHECK(contains(message, "expired"));
}

TEST_CASE("https: a self-signed certificate fails against the system store, verify = false accepts it with a warning") {
  rc::context ctx(quick_stop());
  event_recorder warnings(ctx, "plugin:http:tls:unverified");
  auto src = hello_server(ctx, pki().self_signed, pki().self_key);
  running run(ctx);
  const auto url = fmt::format("https://localhost:{}/hello", src.port());

  const auto verified = call(ctx, {.url = url});
  CHECK(verified.responses.empty());
  REQUIRE(verified.errors.size() == 1);
  CHECK(verified.errors[0]["code"] == "RC5010");
  CHECK(contains(verified.errors[0]["message"], "verification failed"));
  CHECK(warnings.count("plugin:http:tls:unverified") == 0);

  const auto unverified = call(ctx, {.url = url, .tls = {.verify = false}}, 2);
  REQUIRE(unverified.errors.empty());
  REQUIRE(unverified.responses.size() == 2);
  CHECK(unverified.responses[0].body == "hello over TLS");
  const auto w = warnings.named("plugin:http:tls:unverified");
  REQUIRE(w.size() == 1);  // once per endpoint, not per call
  CHECK(w[0].details["level"] == "warn");
  CHECK(w[0].details["url"] == url);
}

TEST_CASE("https: plain HTTP sent to a TLS port is closed at once, and a client that never handshakes is closed") {
  rc::context ctx(quick_stop());
  auto src = hello_server(ctx, pki().cert, pki().key, {.read_timeout = 500ms});
  running run(ctx);

  raw_socket plain(src.port());
  REQUIRE(plain.connected());
  auto started = clock_type::now();
  plain.send("GET /hello HTTP/1.1\r\nHost: test\r\n\r\n");
  std::string got;
  CHECK(plain.closed_within(2000ms, got));
  CHECK(elapsed_ms(started) < 400);  // refused by the handshake, not by the read timeout
  CHECK_FALSE(contains(got, "hello over TLS"));

  raw_socket silent(src.port());
  REQUIRE(silent.connected());
  started = clock_type::now();
  got.clear();
  CHECK(silent.closed_within(3000ms, got));
  CHECK(elapsed_ms(started) >= 450);  // the handshake deadline is read_timeout
  CHECK(got.empty());

  // The server is still serving.
  const auto r =
      call(ctx, {.url = fmt::format("https://localhost:{}/hello", src.port()), .tls = {.ca_file = pki().ca}});
  REQUIRE(r.responses.size() == 1);
  CHECK(r.responses[0].body == "hello over TLS");
}

// ---- options ------------------------------------------------------------------------------------

TEST_CASE("https: missing TLS files are RC5003 naming the option, at build or at start") {
  const auto code_of = [](auto&& f) -> std::string {
    try {
      f();
    } catch (const rc::error& e) {
      return std::string(rc::code_string(e.code())) + " " + e.what();
    }
    return "no error";
  };
  const auto missing = pki().dir + "/missing.pem";
  auto m = code_of([&] { (void)rc::http_source({.tls = rc::tls_server{missing, pki().key}}); });
  CHECK(contains(m, "RC5003"));
  CHECK(contains(m, "tls.cert_file"));
  m = code_of([&] { (void)rc::http_source({.tls = rc::tls_server{pki().cert, ""}}); });
  CHECK(contains(m, "tls.key_file"));
  m = code_of([&] { (void)rc::http({.url = "https://localhost/", .tls = {.ca_file = missing}}); });
  CHECK(contains(m, "RC5003"));
  CHECK(contains(m, "tls.ca_file"));

  // Readable, but a key of another certificate: the route fails to start.
  rc::context ctx(quick_stop());
  auto src = rc::http_source({.tls = rc::tls_server{pki().cert, pki().self_key}});
  ctx.add(rc::craft().id("bad-key").from(src).to(rc::noop()));
  running run(ctx);
  m = code_of([&] { (void)src.port(); });
  CHECK(contains(m, "RC5003"));
  CHECK(contains(m, "tls.key_file"));
}

TEST_CASE("https: a plain route cannot join a TLS server, nor a TLS route a plain one") {
  rc::context ctx(quick_stop());
  auto tls = hello_server(ctx, pki().cert, pki().key);
  running run(ctx);
  auto plain = rc::http_source({.port = tls.port(), .path = "/plain"});
  ctx.add(rc::craft().id("plain").from(plain).to(rc::noop()));
  CHECK_THROWS_AS(plain.port(), rc::error);
}

}  // namespace https_test
