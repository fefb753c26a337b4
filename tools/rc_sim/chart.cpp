#include "chart.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <string>
#include <vector>

namespace rc::sim {
namespace {

constexpr double width = 1200;
constexpr double left = 120;   // row labels
constexpr double right = 270;  // outcome text
constexpr double plot_x0 = left;
constexpr double plot_x1 = width - right;

// Gate colours in chain order (Tableau 10 without its green and red, which mark outcomes).
constexpr const char* gate_colours[] = {"#4e79a7", "#f28e2b", "#b07aa1", "#76b7b2", "#edc948", "#9c755f", "#bab0ac"};
constexpr const char* service_colour = "#a5adb6";
constexpr const char* served_colour = "#2e9e4f";
constexpr const char* refused_colour = "#d62728";
constexpr const char* abandoned_colour = "#555555";
constexpr const char* failed_colour = "#8c1c13";

std::string xml(std::string_view s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

/// Coordinates with one decimal: enough for a screen, identical on every machine.
std::string n1(double v) {
  if (std::fabs(v) < 0.05) v = 0;  // no "-0.0"
  return fmt::format("{:.1f}", v);
}

/// "0.25 ms", "400 ms", "1.25 s", "16.4 s", "2 min 5 s": to the millisecond (10 us below 10 ms),
/// from integer nanoseconds.
std::string human(duration d) {
  const std::int64_t ns = d.count();
  if (ns < 10'000'000) return fmt::format("{} ms", format_ms(duration((ns + 5'000) / 10'000 * 10'000)));
  if (ns < 999'500'000) return fmt::format("{} ms", (ns + 500'000) / 1'000'000);
  const std::int64_t ms = ns / 1'000'000 + (ns % 1'000'000 >= 500'000 ? 1 : 0);  // no overflow near the end
  auto seconds = [](std::int64_t ms_part) {
    std::string out = std::to_string(ms_part / 1000);
    if (ms_part % 1000 != 0) {
      std::string frac = fmt::format("{:03}", ms_part % 1000);
      while (frac.back() == '0') frac.pop_back();
      out += "." + frac;
    }
    return out;
  };
  if (ms < 60'000) return seconds(ms) + " s";
  const std::int64_t rest = ms % 60'000;
  return rest == 0 ? fmt::format("{} min", ms / 60'000) : fmt::format("{} min {} s", ms / 60'000, seconds(rest));
}

/// Rough text width for layout (the chart never depends on a font being installed).
double text_width(std::string_view s, double size) { return double(s.size()) * size * 0.56; }

struct scale {
  std::int64_t end_ns = 1;  // right edge of the axis
  std::int64_t step_ns = 1;
  double x(time_point t) const { return x(t.time_since_epoch().count()); }
  double x(std::int64_t ns) const {
    const double f = std::clamp(double(ns) / double(end_ns), 0.0, 1.0);
    return plot_x0 + f * (plot_x1 - plot_x0);
  }
};

scale make_scale(std::int64_t last_ns) {
  // A 1-2-5 step giving at most 10 ticks.
  std::int64_t span = std::max<std::int64_t>(last_ns, 1'000'000);  // at least 1 ms
  std::int64_t step = 1'000'000;
  for (std::int64_t mag = 1'000'000;; mag *= 10) {
    bool found = false;
    for (std::int64_t m : {1, 2, 5}) {
      if (span / (m * mag) <= 9) {
        step = m * mag;
        found = true;
        break;
      }
    }
    if (found) break;
  }
  scale sc;
  sc.step_ns = step;
  // Round the edge up to a whole step; near the end of engine time that would overflow, and the
  // edge stays where the last event is.
  const std::int64_t steps = span / step + (span % step != 0 ? 1 : 0);
  sc.end_ns = steps <= std::numeric_limits<std::int64_t>::max() / step ? steps * step : span;
  return sc;
}

const char* colour_of(const scenario& s, const run_report& r, std::uint16_t gate) {
  if (gate >= s.gates.size()) return service_colour;
  const auto it = std::find(r.chain.begin(), r.chain.end(), gate);
  const auto pos = std::size_t(it - r.chain.begin());
  return gate_colours[pos % std::size(gate_colours)];
}

class svg_writer {
 public:
  svg_writer(std::ostream& out, const scenario& s, const run_report& r, const summary& sum)
      : out_(out), s_(s), r_(r), sum_(sum) {}

  void write() {
    std::int64_t last = 0;
    for (const auto& q : r_.requests)
      last = std::max({last, q.ended.time_since_epoch().count(), q.arrival.time_since_epoch().count()});
    // Show where the windows end too, unless that would squeeze the requests.
    std::int64_t with_windows = last;
    for (const auto& w : r_.windows) with_windows = std::max(with_windows, w.to.time_since_epoch().count());
    if (double(with_windows) <= 1.5 * double(last)) last = with_windows;
    sc_ = make_scale(last);
    dense_ = r_.requests.size() > s_.chart.max_rows;

    header();
    if (dense_)
      density();
    else
      rows();
    const double height = y_ + 16;
    out_ << fmt::format(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" viewBox=\"0 0 {} {}\" "
        "font-family=\"Helvetica, Arial, sans-serif\">\n",
        n1(width), n1(height), n1(width), n1(height));
    out_ << "<style>text{fill:#222;font-size:11px}.small{font-size:9.5px;fill:#555}.title{font-size:16px;font-weight:"
            "bold}"
            ".bold{font-weight:bold}.grid{stroke:#e4e7eb;stroke-width:1}.axis{font-size:10px;fill:#666}</style>\n";
    out_ << fmt::format("<rect width=\"{}\" height=\"{}\" fill=\"#ffffff\"/>\n", n1(width), n1(height));
    out_ << body_;
    out_ << "</svg>\n";
  }

 private:
  template <class... A>
  void put(fmt::format_string<A...> f, A&&... a) {
    body_ += fmt::format(f, std::forward<A>(a)...);
    body_ += '\n';
  }

  void text(double x, double y, std::string_view s, std::string_view cls = {}, std::string_view anchor = {},
            std::string_view fill = {}) {
    std::string attrs;
    if (!cls.empty()) attrs += fmt::format(" class=\"{}\"", cls);
    if (!anchor.empty()) attrs += fmt::format(" text-anchor=\"{}\"", anchor);
    if (!fill.empty()) attrs += fmt::format(" fill=\"{}\" style=\"fill:{}\"", fill, fill);
    put("<text x=\"{}\" y=\"{}\"{}>{}</text>", n1(x), n1(y), attrs, xml(s));
  }

  // ---- header: title, description, summary, chain and the legend, all above the plot --------
  void header() {
    y_ = 26;
    text(16, y_, fmt::format("rc-sim: {}", s_.name), "title");
    const std::size_t keys = r_.keys.size();
    text(width - 16, y_,
         fmt::format("{} request{} from {} key{} · {} view", r_.requests.size(), r_.requests.size() == 1 ? "" : "s",
                     keys, keys == 1 ? "" : "s", dense_ ? "density" : "per-request"),
         "small", "end");
    y_ += 18;
    for (const auto& line : wrap(s_.description, 170)) {
      text(16, y_, line, "small");
      y_ += 13;
    }
    y_ += 4;
    std::string summary =
        fmt::format("served {} · refused {} · abandoned {}", sum_.served, sum_.refused, sum_.abandoned);
    if (sum_.failed) summary += fmt::format(" · failed {}", sum_.failed);
    summary += fmt::format(" · max wait {} · p50 wait {} · p99 wait {} · last response {}", human(sum_.max_wait),
                           human(sum_.p50_wait), human(sum_.p99_wait), human(sum_.last_end.time_since_epoch()));
    text(16, y_, summary, "bold");
    y_ += 17;

    std::string chain;
    for (auto g : r_.chain) chain += fmt::format("{} ({}) → ", s_.gates[g].name, to_string(s_.gates[g].scope));
    text(16, y_, fmt::format("request path: {}service ({})", chain, human(s_.service)), "small");
    y_ += 18;
    legend();
    y_ += 14;
  }

  void legend() {
    double x = 16;
    const double ty = y_;
    auto advance = [&](std::string_view label) { x += text_width(label, 11) + 22; };
    // Arrival tick.
    put("<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"#111\" stroke-width=\"2\"/>", n1(x + 4), n1(ty - 10),
        n1(x + 4), n1(ty + 2));
    text(x + 12, ty, "arrival");
    advance("arrival  ");
    if (dense_) {
      text(x, ty, "waiting in:", "small");
      x += text_width("waiting in:", 9.5) + 8;
    } else {
      text(x, ty, "waited in:", "small");
      x += text_width("waited in:", 9.5) + 8;
    }
    for (auto g : r_.chain) {
      put("<rect x=\"{}\" y=\"{}\" width=\"14\" height=\"9\" fill=\"{}\"/>", n1(x), n1(ty - 9), colour_of(s_, r_, g));
      const std::string label = s_.gates[g].name;
      text(x + 18, ty, label);
      x += 18 + text_width(label, 11) + 14;
    }
    put("<rect x=\"{}\" y=\"{}\" width=\"14\" height=\"9\" fill=\"{}\"/>", n1(x), n1(ty - 9), service_colour);
    text(x + 18, ty, "service");
    x += 18 + text_width("service", 11) + 22;
    text(x, ty, "ended:", "small");
    x += text_width("ended:", 9.5) + 8;
    mark(request_outcome::served, x + 5, ty - 4, 9);
    text(x + 14, ty, "served");
    x += 14 + text_width("served", 11) + 12;
    mark(request_outcome::refused, x + 5, ty - 4, 9);
    text(x + 14, ty, "refused");
    x += 14 + text_width("refused", 11) + 12;
    mark(request_outcome::abandoned, x + 5, ty - 4, 9);
    text(x + 14, ty, "abandoned (client gave up)");
    x += 14 + text_width("abandoned (client gave up)", 11) + 12;
    if (sum_.failed) {
      mark(request_outcome::failed, x + 5, ty - 4, 9);
      text(x + 14, ty, "failed");
      x += 14 + text_width("failed", 11) + 12;
    }
    if (!r_.windows.empty()) {
      put("<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"#777\" stroke-dasharray=\"3,2\"/>", n1(x + 4),
          n1(ty - 11), n1(x + 4), n1(ty + 2));
      text(x + 10, ty, "window bounds");
    }
  }

  static std::vector<std::string> wrap(const std::string& text, std::size_t columns) {
    std::vector<std::string> lines;
    std::string line;
    std::size_t i = 0;
    while (i < text.size()) {
      std::size_t j = text.find(' ', i);
      if (j == std::string::npos) j = text.size();
      const std::string word = text.substr(i, j - i);
      if (!line.empty() && line.size() + 1 + word.size() > columns) {
        lines.push_back(line);
        line.clear();
      }
      line += (line.empty() ? "" : " ") + word;
      i = j + 1;
    }
    if (!line.empty()) lines.push_back(line);
    return lines;
  }

  // ---- time axis ------------------------------------------------------------------------------
  /// Calls `f(t)` for each tick 0, step, 2 step, ... <= the edge, without stepping past the end of
  /// engine time.
  template <class F>
  void ticks(F&& f) const {
    for (std::int64_t t = 0;; t += sc_.step_ns) {
      f(t);
      if (sc_.end_ns - t < sc_.step_ns) break;
    }
  }
  void axis_labels(double y) {
    ticks([&](std::int64_t t) { text(sc_.x(t), y, human(duration(t)), "axis", "middle"); });
  }
  void grid(double y0, double y1) {
    ticks([&](std::int64_t t) {
      put("<line class=\"grid\" x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\"/>", n1(sc_.x(t)), n1(y0), n1(sc_.x(t)), n1(y1));
    });
  }

  /// The grid goes under what was drawn since `at`; its height is known only afterwards.
  void insert_grid(std::size_t at, double y0, double y1) {
    std::string drawn = body_.substr(at);
    body_.resize(at);
    grid(y0, y1);
    body_ += drawn;
  }

  // ---- outcome marks --------------------------------------------------------------------------
  void mark(request_outcome o, double x, double y, double size) {
    const double h = size / 2;
    switch (o) {
      case request_outcome::served:
        put("<circle cx=\"{}\" cy=\"{}\" r=\"{}\" fill=\"{}\"/>", n1(x), n1(y), n1(h * 0.9), served_colour);
        break;
      case request_outcome::refused:
        put("<path d=\"M{} {}L{} {}M{} {}L{} {}\" stroke=\"{}\" stroke-width=\"2.2\"/>", n1(x - h), n1(y - h),
            n1(x + h), n1(y + h), n1(x - h), n1(y + h), n1(x + h), n1(y - h), refused_colour);
        break;
      case request_outcome::abandoned:
        put("<circle cx=\"{}\" cy=\"{}\" r=\"{}\" fill=\"#fff\" stroke=\"{}\" stroke-width=\"1.6\"/>", n1(x), n1(y),
            n1(h * 0.85), abandoned_colour);
        put("<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"{}\" stroke-width=\"1.6\"/>", n1(x - h * 0.6),
            n1(y + h * 0.6), n1(x + h * 0.6), n1(y - h * 0.6), abandoned_colour);
        break;
      case request_outcome::failed:
        put("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{}\"/>", n1(x - h * 0.8), n1(y - h * 0.8),
            n1(h * 1.6), n1(h * 1.6), failed_colour);
        break;
    }
  }

  std::string outcome_text(const request_result& q) const {
    const std::string at = human(q.ended.time_since_epoch());
    switch (q.outcome) {
      case request_outcome::served:
        return fmt::format("served at {}", at);
      case request_outcome::refused: {
        std::string t = fmt::format("{} at {}", q.status, at);
        for (const auto& p : q.passes)
          if (p.outcome == gate_outcome::rejected && p.gate < s_.gates.size())
            t = fmt::format("{} by {} at {}", q.status, shorten(s_.gates[p.gate].name, 16), at);
        if (q.retry_after) t += fmt::format(", retry {}", human(*q.retry_after));
        return t;
      }
      case request_outcome::abandoned:
        return fmt::format("gave up at {}", at);
      case request_outcome::failed:
        return fmt::format("failed {} at {}", q.status, at);
    }
    return {};
  }

  // ---- the per-request view -------------------------------------------------------------------
  struct group {
    std::uint32_t key;
    std::vector<const request_result*> rows;
  };

  std::vector<group> groups_by_key() const {
    std::vector<group> groups(r_.keys.size());
    for (std::uint32_t k = 0; k < groups.size(); ++k) groups[k].key = k;
    for (const auto& q : r_.requests) groups[q.key].rows.push_back(&q);
    return groups;
  }

  /// The windowed gates that drew windows for `key` (or all_keys), in chain order.
  std::vector<std::uint16_t> window_gates(std::uint32_t key) const {
    std::vector<std::uint16_t> out;
    for (auto g : r_.chain)
      for (const auto& w : r_.windows)
        if (w.gate == g && w.key == key) {
          out.push_back(g);
          break;
        }
    return out;
  }

  /// One lane per windowed gate: a bracket per window, labelled at the left.
  void window_lanes(std::uint32_t key, std::vector<std::pair<double, const window_mark*>>& bounds) {
    for (auto g : window_gates(key)) {
      const char* colour = colour_of(s_, r_, g);
      const double mid = y_ + 6;
      text(plot_x0 - 8, mid + 3.5, fmt::format("{} windows", s_.gates[g].name), "small", "end", colour);
      int n = 0;
      for (const auto& w : r_.windows) {
        if (w.gate != g || w.key != key) continue;
        const double x0 = sc_.x(w.from), x1 = sc_.x(w.to);
        const bool clipped = w.to.time_since_epoch().count() > sc_.end_ns;  // ends past the axis: no end tick
        put("<path d=\"M{} {}V{}H{}{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"1.5\"/>", n1(x0 + 1), n1(mid + 4),
            n1(mid), n1(x1 - 1), clipped ? std::string() : fmt::format("V{}", n1(mid + 4)), colour);
        ++n;
        const std::string label =
            fmt::format("window {}: {} to {}", n, human(w.from.time_since_epoch()), human(w.to.time_since_epoch()));
        if (text_width(label, 9.5) + 8 < x1 - x0) text(x0 + 5, mid - 2, label, "small");
        bounds.emplace_back(mid, &w);
      }
      y_ += 14;
    }
  }

  void window_bounds(const std::vector<std::pair<double, const window_mark*>>& bounds, double y1) {
    for (const auto& [y0, w] : bounds) {
      const char* colour = colour_of(s_, r_, w->gate);
      for (const time_point t : {w->from, w->to}) {
        if (t.time_since_epoch().count() > sc_.end_ns) continue;
        put("<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"{}\" stroke-opacity=\"0.6\" "
            "stroke-dasharray=\"3,3\"/>",
            n1(sc_.x(t)), n1(y0), n1(sc_.x(t)), n1(y1), colour);
      }
    }
  }

  void rows() {
    const std::size_t n = r_.requests.size();
    const double rh = std::clamp(std::floor(720.0 / double(std::max<std::size_t>(n, 1))), 11.0, 22.0);
    const double font = std::min(11.0, rh - 2);

    axis_labels(y_);
    y_ += 8;
    const double grid_top = y_;
    // Grid first so everything else draws over it; its bottom is known only at the end.
    const std::size_t grid_at = body_.size();

    std::vector<std::pair<double, const window_mark*>> global_bounds;
    if (!window_gates(window_mark::all_keys).empty()) y_ += 6;  // clear of the axis labels
    window_lanes(window_mark::all_keys, global_bounds);

    for (const auto& g : groups_by_key()) {
      if (g.rows.empty()) continue;
      y_ += 4;
      const std::string& key = r_.keys[g.key];
      put("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"17\" fill=\"#f3f5f7\"/>", n1(8), n1(y_), n1(width - 16));
      text(14, y_ + 12.5,
           fmt::format("{} · {} request{}", key.empty() ? "no key" : "key " + key, g.rows.size(),
                       g.rows.size() == 1 ? "" : "s"),
           "bold");
      y_ += 21;
      std::vector<std::pair<double, const window_mark*>> bounds;
      window_lanes(g.key, bounds);
      for (const request_result* q : g.rows) request_row(*q, rh, font);
      window_bounds(bounds, y_);
    }
    window_bounds(global_bounds, y_);
    insert_grid(grid_at, grid_top, y_);
    y_ += 4;
    axis_labels(y_ + 8);
    y_ += 14;
  }

  void request_row(const request_result& q, double rh, double font) {
    const double mid = y_ + rh / 2;
    text(plot_x0 - 8, mid + font * 0.35, fmt::format("#{}", q.id), "small", "end");
    // The life line: arrival to end.
    put("<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"#c9ced4\" stroke-width=\"1\"/>", n1(sc_.x(q.arrival)),
        n1(mid), n1(sc_.x(q.ended)), n1(mid));
    for (const auto& seg : q.segments) {
      const bool service = seg.gate >= s_.gates.size();
      const double h = service ? rh * 0.34 : rh * 0.62;
      const double x0 = sc_.x(seg.from);
      const double w = std::max(1.0, sc_.x(seg.to) - x0);
      put("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{}\"/>", n1(x0), n1(mid - h / 2), n1(w), n1(h),
          colour_of(s_, r_, seg.gate));
      // Wide enough: say what the wait was, in the bar.
      if (!service && rh >= 14) {
        std::string label = human(seg.to - seg.from);
        const gate_pass* pass = nullptr;
        for (const auto& p : q.passes)
          if (p.gate == seg.gate && p.at <= seg.from) pass = &p;
        if (pass && pass->hit > 0 && s_.gates[pass->gate].kind != gate_kind::retry)
          label = fmt::format("hit {} · {}", pass->hit, label);
        if (text_width(label, 9.5) + 8 < w)
          put("<text x=\"{}\" y=\"{}\" class=\"small\" style=\"fill:#fff\">{}</text>", n1(x0 + 4), n1(mid + 3.3),
              xml(label));
      }
    }
    // Refusals inside the request's life (a retry tried again) and failed downstream attempts:
    // a tick in the colour of the gate (or the failure) where they happened.
    for (std::size_t i = 0; i < q.passes.size(); ++i) {
      const auto& p = q.passes[i];
      const bool refused_here = p.outcome == gate_outcome::rejected && p.gate < s_.gates.size();
      const bool failed_here = p.outcome == gate_outcome::failed;
      if (!refused_here && !failed_here) continue;
      const double x = sc_.x(p.at + p.wait);
      put("<rect x=\"{}\" y=\"{}\" width=\"2.5\" height=\"{}\" fill=\"{}\"/>", n1(x - 1.2), n1(y_ + rh * 0.1),
          n1(rh * 0.8), refused_here ? colour_of(s_, r_, p.gate) : failed_colour);
    }
    const double ax = sc_.x(q.arrival);
    put("<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"#111\" stroke-width=\"2\"/>", n1(ax),
        n1(y_ + rh * 0.12), n1(ax), n1(y_ + rh * 0.88));
    mark(q.outcome, sc_.x(q.ended), mid, std::min(rh * 0.62, 11.0));
    text(plot_x1 + 14, mid + font * 0.35, outcome_text(q), font < 10.5 ? "small" : "", {},
         q.outcome == request_outcome::refused ? refused_colour : "");
    y_ += rh;
  }

  // ---- the density view -----------------------------------------------------------------------
  void density() {
    constexpr std::size_t bins = 240;
    constexpr std::size_t max_groups = 12;
    const double bin_ns = double(sc_.end_ns) / double(bins);
    const std::size_t layers = s_.gates.size() + 1;  // gates, then the service (the last layer)

    // Groups: the busiest keys, the rest together.
    std::vector<std::uint64_t> per_key(r_.keys.size());
    for (const auto& q : r_.requests) ++per_key[q.key];
    std::vector<std::uint32_t> order(r_.keys.size());
    for (std::uint32_t k = 0; k < order.size(); ++k) order[k] = k;
    std::stable_sort(order.begin(), order.end(), [&](auto a, auto b) { return per_key[a] > per_key[b]; });
    const bool overflow = order.size() > max_groups;
    const std::size_t shown = overflow ? max_groups - 1 : order.size();
    std::vector<std::uint32_t> group_of(r_.keys.size(), std::uint32_t(shown));
    std::vector<std::uint32_t> shown_keys(order.begin(), order.begin() + std::ptrdiff_t(shown));
    std::sort(shown_keys.begin(), shown_keys.end());  // first arrival order
    for (std::uint32_t i = 0; i < shown_keys.size(); ++i) group_of[shown_keys[i]] = i;
    const std::size_t group_count = shown + (overflow ? 1 : 0);

    // Time-weighted number of requests in each state per bin, and ends/arrivals per bin.
    std::vector<std::vector<double>> busy(group_count * layers, std::vector<double>(bins + 1));
    std::vector<std::vector<double>> full(group_count * layers, std::vector<double>(bins + 2));
    std::vector<std::array<std::uint64_t, 4>> ends(group_count * bins);
    std::vector<std::uint64_t> arrivals(group_count * bins);
    std::vector<std::uint64_t> group_size(group_count);
    auto bin_of = [&](std::int64_t ns) {
      return std::min<std::size_t>(bins - 1, std::size_t(std::max(0.0, double(ns) / bin_ns)));
    };
    for (const auto& q : r_.requests) {
      const std::size_t g = group_of[q.key];
      ++group_size[g];
      ++arrivals[g * bins + bin_of(q.arrival.time_since_epoch().count())];
      ++ends[g * bins + bin_of(q.ended.time_since_epoch().count())][std::size_t(q.outcome)];
      for (const auto& seg : q.segments) {
        const std::size_t layer = std::min<std::size_t>(seg.gate, layers - 1);
        auto& acc = busy[g * layers + layer];
        auto& mid = full[g * layers + layer];
        const std::int64_t from_ns = seg.from.time_since_epoch().count(), to_ns = seg.to.time_since_epoch().count();
        const double a = double(from_ns), b = double(to_ns);
        const std::size_t ia = bin_of(from_ns), ib = bin_of(to_ns);  // not via double: 2^63 does not fit back
        if (ia == ib) {
          acc[ia] += b - a;
        } else {
          acc[ia] += double(ia + 1) * bin_ns - a;
          acc[ib] += b - double(ib) * bin_ns;
          mid[ia + 1] += 1;  // every bin strictly between is covered in full
          mid[ib] -= 1;
        }
      }
    }
    for (std::size_t i = 0; i < busy.size(); ++i) {
      double running = 0;
      for (std::size_t b = 0; b < bins; ++b) {
        running += full[i][b];
        busy[i][b] = busy[i][b] / bin_ns + running;
      }
    }

    text(16, y_,
         fmt::format("{} requests are more than chart.max_rows ({}): one band per key{}, showing how many requests "
                     "waited in each gate over time, then how many arrived (line) and ended (bars) per {}.",
                     r_.requests.size(), s_.chart.max_rows,
                     overflow ? fmt::format(" (the {} busiest, then the rest)", shown) : std::string(),
                     human(duration(std::int64_t(bin_ns)))),
         "small");
    y_ += 20;
    axis_labels(y_);
    y_ += 8;
    const double grid_top = y_;
    const std::size_t grid_at = body_.size();

    for (std::size_t g = 0; g < group_count; ++g) {
      const bool rest = g == shown;
      const std::string name = rest ? fmt::format("{} other keys", order.size() - shown)
                                    : (r_.keys[shown_keys[g]].empty() ? "no key" : "key " + r_.keys[shown_keys[g]]);
      put("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"17\" fill=\"#f3f5f7\"/>", n1(8), n1(y_), n1(width - 16));
      text(14, y_ + 12.5, fmt::format("{} · {} requests", name, group_size[g]), "bold");
      y_ += 21;

      // Stacked waiting counts.
      const double area_h = 64;
      double peak = 0;
      for (std::size_t b = 0; b < bins; ++b) {
        double total = 0;
        for (std::size_t l = 0; l < layers; ++l) total += busy[g * layers + l][b];
        peak = std::max(peak, total);
      }
      const double top = y_, base = y_ + area_h;
      put("<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"#999\"/>", n1(plot_x0), n1(base), n1(plot_x1),
          n1(base));
      text(plot_x0 - 8, top + 9, fmt::format("{} waiting", compact(peak)), "small", "end");
      text(plot_x0 - 8, base, "0", "small", "end");
      if (peak > 0) {
        std::vector<double> floor_(bins, 0.0);
        std::vector<std::size_t> layer_order;
        for (auto c : r_.chain) layer_order.push_back(c);
        layer_order.push_back(layers - 1);
        for (std::size_t l : layer_order) {
          const auto& v = busy[g * layers + l];
          bool any = false;
          for (std::size_t b = 0; b < bins; ++b) any = any || v[b] > 0;
          if (!any) continue;
          std::string d;
          for (std::size_t b = 0; b < bins; ++b) {
            const double x0 = plot_x0 + (plot_x1 - plot_x0) * double(b) / double(bins);
            const double x1 = plot_x0 + (plot_x1 - plot_x0) * double(b + 1) / double(bins);
            const double y = base - (floor_[b] + v[b]) / peak * area_h;
            d += fmt::format("{}{} {}H{}", b == 0 ? "M" : "L", n1(x0), n1(y), n1(x1));
          }
          for (std::size_t b = bins; b-- > 0;) {
            const double x1 = plot_x0 + (plot_x1 - plot_x0) * double(b + 1) / double(bins);
            const double x0 = plot_x0 + (plot_x1 - plot_x0) * double(b) / double(bins);
            const double y = base - floor_[b] / peak * area_h;
            d += fmt::format("L{} {}H{}", n1(x1), n1(y), n1(x0));
          }
          put("<path d=\"{}Z\" fill=\"{}\"/>", d,
              l < s_.gates.size() ? colour_of(s_, r_, std::uint16_t(l)) : service_colour);
          for (std::size_t b = 0; b < bins; ++b) floor_[b] += v[b];
        }
      }
      y_ = base + 6;

      // Arrivals and ends per bin.
      const double strip_h = 30;
      std::uint64_t most = 1;
      for (std::size_t b = 0; b < bins; ++b) {
        std::uint64_t e = 0;
        for (auto c : ends[g * bins + b]) e += c;
        most = std::max({most, e, arrivals[g * bins + b]});
      }
      const double sbase = y_ + strip_h;
      put("<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"#999\"/>", n1(plot_x0), n1(sbase), n1(plot_x1),
          n1(sbase));
      text(plot_x0 - 8, y_ + 9, fmt::format("{} / slice", most), "small", "end");
      const char* outcome_colours[] = {served_colour, refused_colour, abandoned_colour, failed_colour};
      const double bw = (plot_x1 - plot_x0) / double(bins);
      for (std::size_t b = 0; b < bins; ++b) {
        double stack = 0;
        for (std::size_t o = 0; o < 4; ++o) {
          const auto c = ends[g * bins + b][o];
          if (c == 0) continue;
          const double h = double(c) / double(most) * strip_h;
          put("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{}\"/>", n1(plot_x0 + bw * double(b)),
              n1(sbase - stack - h), n1(std::max(bw - 0.4, 0.6)), n1(h), outcome_colours[o]);
          stack += h;
        }
      }
      std::string line;
      for (std::size_t b = 0; b < bins; ++b) {
        const double y = sbase - double(arrivals[g * bins + b]) / double(most) * strip_h;
        line += fmt::format("{}{} {}H{}", b == 0 ? "M" : "L", n1(plot_x0 + bw * double(b)), n1(y),
                            n1(plot_x0 + bw * double(b + 1)));
      }
      put("<path d=\"{}\" fill=\"none\" stroke=\"#111\" stroke-width=\"1\"/>", line);

      // Outcome counts at the right.
      std::array<std::uint64_t, 4> totals{};
      for (std::size_t b = 0; b < bins; ++b)
        for (std::size_t o = 0; o < 4; ++o) totals[o] += ends[g * bins + b][o];
      double ty = top + 12;
      const char* names[] = {"served", "refused", "abandoned", "failed"};
      for (std::size_t o = 0; o < 4; ++o) {
        if (totals[o] == 0 && o == 3) continue;
        mark(request_outcome(o), plot_x1 + 20, ty - 4, 9);
        text(plot_x1 + 30, ty, fmt::format("{} {}", totals[o], names[o]));
        ty += 15;
      }

      // Fixed windows of this key (a few hundred at most, else they would hide the data).
      if (!rest) {
        std::size_t count = 0;
        for (const auto& w : r_.windows) count += w.key == shown_keys[g] ? 1 : 0;
        if (count > 0 && count <= 300)
          for (const auto& w : r_.windows) {
            if (w.key != shown_keys[g]) continue;
            for (const time_point t : {w.from, w.to})
              put("<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"{}\" stroke-opacity=\"0.6\" "
                  "stroke-dasharray=\"3,3\"/>",
                  n1(sc_.x(t)), n1(top), n1(sc_.x(t)), n1(sbase), colour_of(s_, r_, w.gate));
          }
      }
      y_ = sbase + 14;
    }

    insert_grid(grid_at, grid_top, y_);
    axis_labels(y_ + 4);
    y_ += 10;
  }

  static std::string shorten(const std::string& s, std::size_t n) {
    return s.size() <= n ? s : s.substr(0, n - 1) + "…";
  }

  static std::string compact(double v) {
    if (v >= 10) return fmt::format("{:.0f}", v);
    return fmt::format("{:.2f}", v);
  }

  std::ostream& out_;
  const scenario& s_;
  const run_report& r_;
  const summary& sum_;
  scale sc_;
  bool dense_ = false;
  double y_ = 0;
  std::string body_;
};

}  // namespace

void write_svg(std::ostream& out, const scenario& s, const run_report& r, const summary& sum) {
  svg_writer(out, s, r, sum).write();
}

}  // namespace rc::sim
