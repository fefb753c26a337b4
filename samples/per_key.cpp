// per_key: one throttle, one bucket per tenant.
//
// acme (heavy) sends 8 requests at once, globex and initech (light) 2 each, all at t = 0. The same
// traffic runs through two routes with a throttle of 2/s (burst 2): one shared bucket, and one
// bucket per tenant (`key`). With the shared bucket the light tenants queue behind acme; with a
// key they pass at once and acme alone is paced. Virtual time: instant and exact.
#include <algorithm>
#include <map>
#include <rc/rc.hpp>
#include <string>
#include <vector>

namespace {

struct request {
  std::string tenant;
  int number;
};

const std::vector<std::string> tenants = {"acme", "globex", "initech"};

std::vector<request> traffic() {
  std::vector<request> out;
  for (int i = 1; i <= 8; ++i) out.push_back({"acme", i});
  for (int i = 1; i <= 2; ++i) out.push_back({"globex", i});
  for (int i = 1; i <= 2; ++i) out.push_back({"initech", i});
  return out;
}

/// Admission times (ms) per tenant, in arrival order.
std::map<std::string, std::vector<double>> admissions(const rc::spy<request>& out) {
  std::map<std::string, std::vector<double>> by_tenant;
  for (const auto& r : out.received()) by_tenant[r.body.tenant].push_back(rc::to_ms(r.at));
  return by_tenant;
}

void print(const char* title, const std::map<std::string, std::vector<double>>& by_tenant) {
  fmt::print("{}\n", title);
  for (const auto& t : tenants) fmt::print("  {:<8} admitted at {} ms\n", t, fmt::join(by_tenant.at(t), ", "));
}

double light_tenants_max_wait(const std::map<std::string, std::vector<double>>& by_tenant) {
  double w = 0;
  for (const auto& t : {"globex", "initech"})
    for (double at : by_tenant.at(t)) w = std::max(w, at);  // everyone arrived at 0 ms
  return w;
}

}  // namespace

int main() {
  rc::context ctx(rc::virtual_time);
  rc::spy<request> shared_out, keyed_out;

  ctx.add(rc::craft()
              .id("shared")
              .from(rc::simple(traffic()))
              .throttle({.rate = 2, .label = "shared"})  // one bucket for everyone
              .to(shared_out));

  ctx.add(rc::craft()
              .id("per-tenant")
              .from(rc::simple(traffic()))
              .header("tenant", [](const rc::exchange& ex) { return ex.body<request>().tenant; })
              .throttle({.rate = 2,
                         .key = [](const rc::exchange& ex) { return ex.header_or("tenant", "anonymous"); },
                         .label = "per-tenant"})
              .to(keyed_out));

  // The keyed throttle's events name the key: count who was made to wait.
  std::map<std::string, int> delayed_by_key;
  auto sub = ctx.for_route("per-tenant", [&](const rc::event& e) {
    if (e.id == rc::event_id::throttle_delayed) ++delayed_by_key[e.details.at("key")];
  });

  fmt::print("per_key: acme sends 8 requests at once, globex and initech 2 each; throttle 2/s, burst 2\n\n");
  ctx.start();
  ctx.drain();
  ctx.stop();

  const auto shared = admissions(shared_out);
  const auto keyed = admissions(keyed_out);
  print("one shared bucket (no key):", shared);
  print("one bucket per tenant (key = header \"tenant\"):", keyed);
  fmt::print("route:throttle:delayed by key: acme {}, globex {}, initech {}\n\n", delayed_by_key["acme"],
             delayed_by_key["globex"], delayed_by_key["initech"]);

  // acme's pace once its burst of 2 is spent.
  const auto& acme = keyed.at("acme");
  const double acme_rate = (static_cast<double>(acme.size()) - 2) / ((acme.back() - acme.front()) / 1000);
  fmt::print(
      "result: with a key the light tenants waited at most {} ms (shared bucket: {} ms), and acme alone was paced "
      "at {:.2f}/s\n",
      light_tenants_max_wait(keyed), light_tenants_max_wait(shared), acme_rate);
  return light_tenants_max_wait(keyed) == 0 ? 0 : 1;
}
