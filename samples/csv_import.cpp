// csv_import: a folder of CSV order files becomes one JSON Lines file, each row checked and each
// customer paced on its own.
//
// Three files land in an inbox. The route claims each file (rc::directory), splits it into rows
// (rc::csv), runs up to 4 rows of a file at once, rejects rows that fail the checks, lets every
// customer through at 2 rows/s (a keyed throttle: one heavy customer never delays the others),
// appends the good rows to orders.jsonl and folds each file back into a count. A file whose run ends moves to .done/.
// Virtual time: instant, and the times printed are exact.
#include <filesystem>
#include <fstream>
#include <map>
#include <rc/rc.hpp>
#include <string>
#include <vector>

namespace fs = std::filesystem;
using namespace std::chrono_literals;

namespace {

struct order_line {
  std::string order;
  std::string customer;
  int qty = 0;
};

void from_json(const nlohmann::json& j, order_line& o) {
  j.at("order").get_to(o.order);
  j.at("customer").get_to(o.customer);
  o.qty = std::stoi(j.at("qty").get<std::string>());  // CSV fields are text
}
void to_json(nlohmann::json& j, const order_line& o) {
  j = {{"order", o.order}, {"customer", o.customer}, {"qty", o.qty}};
}

/// The checks a row must pass; a failure is RC5002 naming the row.
order_line checked(const order_line& o) {
  if (o.customer.empty()) throw rc::error(rc::errc::validation, fmt::format("order {}: no customer", o.order));
  if (o.qty <= 0)
    throw rc::error(rc::errc::validation, fmt::format("order {}: qty must be > 0, got {}", o.order, o.qty));
  return o;
}

void write(const fs::path& p, const std::string& text) { std::ofstream(p, std::ios::binary) << text; }

}  // namespace

int main() {
  const fs::path root = fs::temp_directory_path() / fmt::format("rc-csv-import-{}", ::getpid());
  const fs::path inbox = root / "inbox", out = root / "orders.jsonl";
  fs::create_directories(inbox);
  write(inbox / "1-monday.csv", "order,customer,qty\r\nA1,acme,3\r\nA2,acme,1\r\nG1,globex,2\r\nA3,acme,5\r\n");
  write(inbox / "2-tuesday.csv", "order,customer,qty\r\nA4,acme,2\r\nI1,initech,0\r\nG2,globex,1\r\n");
  write(inbox / "3-wednesday.csv", "order,customer,qty\r\nA5,acme,4\r\nA6,,1\r\nA7,acme,2\r\n");

  rc::context ctx(rc::virtual_time);
  std::vector<std::string> summary;
  std::vector<std::string> rejected;
  std::map<std::string, std::vector<double>> written_at;  // customer -> virtual ms

  ctx.add(rc::craft()
              .id("csv-import")
              .from(rc::directory(inbox.string(), {.glob = "*.csv", .stop_when_empty = true}))
              .split([](const std::string& text) { return rc::csv<order_line>()(text); }, {.parallelism = 4})
              .transform(checked)
              .throttle({.rate = 2, .key = [](const rc::exchange& ex) { return ex.body<order_line>().customer; }})
              .to(rc::jsonl({.path = out.string()}))
              .process(
                  [&](rc::exchange& ex) { written_at[ex.body<order_line>().customer].push_back(rc::to_ms(ctx.now())); })
              .aggregate([](std::vector<order_line>&& rows) { return rows.size(); })
              .process([&](rc::exchange& ex) {
                summary.push_back(
                    fmt::format("{}: {} rows", ex.header_or("routecraft.file.name", "?"), ex.body<std::size_t>()));
              }));

  auto sub = ctx.on("route:exchange:failed", [&](const rc::event& e) {
    rejected.push_back(e.details.at("error").at("message").get<std::string>());
  });

  ctx.start();
  ctx.drain();
  ctx.stop();

  fmt::print("files: {}\n", fmt::join(summary, ", "));
  for (const auto& r : rejected) fmt::print("rejected: {}\n", r);
  for (const auto& [customer, at] : written_at) fmt::print("{:<8} written at {} ms\n", customer, fmt::join(at, ", "));

  std::size_t lines = 0;
  std::ifstream in(out);
  for (std::string l; std::getline(in, l);) ++lines;
  std::size_t done = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(inbox / ".done")) ++done;
  fmt::print("result: {} rows in orders.jsonl, {} rejected, {} files in .done\n", lines, rejected.size(), done);
  fs::remove_all(root);
  return lines == 8 && rejected.size() == 2 && done == 3 ? 0 : 1;
}
