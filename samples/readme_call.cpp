// samples/readme_call.cpp: built and run by ctest, which also checks that README.md shows it verbatim.
#include <rc/rc.hpp>
#include <string>

int main() {
  rc::context ctx;  // real time
  ctx.add(rc::craft()
              .id("pricing")
              .from(rc::direct<std::string>("price"))  // serves "price": a SKU in, a price out
              .log()                                   // [pricing] <exchange id> "ab-12"
              .transform([](const std::string& sku) { return 2.5 * static_cast<double>(sku.size()); }));
  ctx.start();

  // Blocks until the route has run; in a coroutine: co_await ctx.request<double>(...).
  const double price = ctx.request_sync<double>(rc::direct<std::string>("price"), "ab-12");
  fmt::print("ab-12 costs {:.2f}\n", price);

  try {
    ctx.send_sync(rc::direct<std::string>("stock"), "ab-12", {{"warehouse", "north"}});
  } catch (const rc::error& e) {
    fmt::print("{}\n", e.what());  // RC5004: no route serves direct endpoint "stock"
  }
  ctx.stop();
}
