// order_fanout: an order is split into its lines, each line is priced by another route and
// checked, the lines are folded back into a priced order, and a choice sends large orders to a
// review queue and the rest to invoicing.
//
// The "price" route is served over rc::direct and takes 20 ms per line (a catalogue lookup);
// split runs two lines of an order at once, so an order of 3 lines is priced in 40 ms. A line
// whose SKU the catalogue does not know fails validation (RC5002) and is left out of its order,
// which goes on with the lines that passed. Virtual time: instant, and the times printed are exact.
#include <map>
#include <rc/rc.hpp>
#include <string>
#include <vector>

using namespace std::chrono_literals;

namespace {

struct line {
  std::string sku;
  int qty = 0;
};
struct order {
  std::string id;
  std::vector<line> lines;
};
struct quote {
  std::string sku;
  double unit_price = 0;  // 0: not in the catalogue
};
struct priced_line {
  std::string sku;
  int qty = 0;
  double unit_price = 0;
  double amount() const { return unit_price * qty; }
};
struct priced_order {
  std::vector<priced_line> lines;
  double total = 0;
};

const std::map<std::string, double> catalogue = {{"desk", 420.0}, {"chair", 135.5}, {"lamp", 39.9}};

}  // namespace

int main() {
  rc::context ctx(rc::virtual_time);

  // The catalogue: a SKU's unit price after a 20 ms lookup.
  ctx.add(rc::craft()
              .id("price")
              .from(rc::direct<line>("price"))  // serves "price": a line in, a quote out
              .delay(20ms)                      // the lookup's latency
              .transform([](const line& l) {
                auto it = catalogue.find(l.sku);
                return quote{l.sku, it == catalogue.end() ? 0.0 : it->second};
              }));

  std::vector<std::string> out;
  auto deliver = [&](const char* queue) {
    return [&out, &ctx, queue](rc::exchange& ex) {
      const auto& o = ex.body<priced_order>();
      out.push_back(fmt::format("{} -> {:<10} {} line{}, total {:8.2f}, at {} ms", ex.header_or("order", "?"), queue,
                                o.lines.size(), o.lines.size() == 1 ? "" : "s", o.total, rc::to_ms(ctx.now())));
    };
  };

  ctx.add(rc::craft()
              .id("orders")
              .from(rc::simple(std::vector<order>{
                  {"A-1", {{"desk", 2}, {"chair", 4}, {"lamp", 1}}},
                  {"B-2", {{"lamp", 3}, {"easel", 1}}},
                  {"C-3", {{"chair", 1}}},
              }))
              .header("order", [](const rc::exchange& ex) { return ex.body<order>().id; })
              .split([](const order& o) { return o.lines; }, {.parallelism = 2})
              .enrich<quote>(rc::direct<line>("price"),
                             [](line&& l, quote&& q) {
                               return priced_line{l.sku, l.qty, q.unit_price};
                             })
              .validate([](const priced_line& l) {
                if (l.unit_price <= 0) throw std::invalid_argument(fmt::format("{} is not in the catalogue", l.sku));
                if (l.qty <= 0) throw std::invalid_argument(fmt::format("{}: qty must be > 0", l.sku));
              })
              .aggregate([](std::vector<priced_line>&& lines) {
                priced_order o{std::move(lines), 0};
                for (const auto& l : o.lines) o.total += l.amount();
                return o;
              })
              .choice(rc::when([](const priced_order& o) { return o.total >= 1000; },
                               rc::branch<priced_order>().process(deliver("review")), "large"),
                      rc::otherwise(rc::branch<priced_order>().process(deliver("invoicing")))));

  std::vector<std::string> rejected;
  auto sub = ctx.on("route:exchange:failed", [&](const rc::event& e) {
    rejected.push_back(e.details.at("error").at("message").get<std::string>());
  });

  ctx.start();
  ctx.drain();
  ctx.stop();

  for (const auto& l : out) fmt::print("{}\n", l);
  for (const auto& r : rejected) fmt::print("rejected line: {}\n", r);
  fmt::print("result: {} orders delivered, {} line rejected\n", out.size(), rejected.size());
  return out.size() == 3 && rejected.size() == 1 ? 0 : 1;
}
