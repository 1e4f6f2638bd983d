#include "harness/report_svg.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace attnkit {
namespace {

constexpr const char* kColors[] = {"#4e79a7", "#f28e2b", "#59a14f", "#e15759",
                                   "#76b7b2", "#edc948", "#b07aa1", "#9c755f"};

// Backends with at least one timed result, in order of first appearance;
// the others, with why, for the note.
struct Legend {
  std::vector<std::string> drawn;
  std::vector<std::string> notes;  // "cuda: unavailable: no GPU"
};

Legend MakeLegend(const CompareReport& report) {
  Legend legend;
  std::vector<std::string> order;
  std::map<std::string, bool> ran;
  std::map<std::string, std::set<std::string>> why;
  for (const ProblemResult& p : report.problems()) {
    for (const BackendResult& r : p.results()) {
      if (std::find(order.begin(), order.end(), r.backend()) == order.end()) {
        order.push_back(r.backend());
      }
      if (r.status() == "ok") {
        ran[r.backend()] = true;
      } else {
        why[r.backend()].insert(absl::StrCat(r.status(), ": ", r.detail()));
      }
    }
  }
  for (const std::string& b : order) {
    if (ran[b]) {
      legend.drawn.push_back(b);
    } else {
      legend.notes.push_back(absl::StrCat(b, ": ", absl::StrJoin(why[b], "; ")));
    }
  }
  return legend;
}

const BackendResult* ResultFor(const ProblemResult& p, const std::string& backend) {
  for (const BackendResult& r : p.results()) {
    if (r.backend() == backend) return &r;
  }
  return nullptr;
}

std::string Milliseconds(double seconds) {
  const double ms = seconds * 1e3;
  return ms >= 100  ? absl::StrFormat("%.0f ms", ms)
         : ms >= 10 ? absl::StrFormat("%.1f ms", ms)
                    : absl::StrFormat("%.2f ms", ms);
}

}  // namespace

std::string EscapeMarkup(const std::string& s) {
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

std::string ReportToSvg(const CompareReport& report) {
  const Legend legend = MakeLegend(report);
  const int n_bars = std::max<int>(1, static_cast<int>(legend.drawn.size()));
  double top = 10;
  for (const ProblemResult& p : report.problems()) {
    for (const BackendResult& r : p.results()) {
      if (r.status() == "ok") {
        top = std::max({top, r.pct_of_limit(), r.pct_of_limit_high()});
      }
    }
  }
  // Round gridlines: the smallest step of 10, 20, 25 or 50 that needs at
  // most six of them (the top may pass 100: a cache-resident decode).
  double step = 50;
  for (double candidate : {10.0, 20.0, 25.0, 50.0}) {
    if (std::ceil(top / candidate) <= 6) {
      step = candidate;
      break;
    }
  }
  const int ticks = static_cast<int>(std::ceil(top / step));
  top = ticks * step;
  // Bars wide enough for a rotated two-part label; the canvas fits the data.
  const int bar = 24, gap = 36, left = 76, right = 24, plot_h = 300;
  const int label_room = 96;  // above the tallest bar, for its label
  const int header = 74 + 16 * static_cast<int>(legend.notes.size());
  const int group_w = n_bars * bar + gap;
  const int legend_w = 24 + 120 * n_bars;
  const int width =
      std::max({480, left + group_w * report.problems_size() + right, left + legend_w});
  const int top_margin = header + label_room;
  const int height = top_margin + plot_h + 130;
  std::string svg = absl::StrFormat(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
      "viewBox=\"0 0 %d %d\" font-family=\"sans-serif\" font-size=\"11\">\n"
      "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
      width, height, width, height);
  absl::StrAppendFormat(
      &svg,
      "<text x=\"%d\" y=\"20\" font-size=\"14\" font-weight=\"bold\">attnkit compare: %% of the "
      "machine limit that applies</text>\n",
      left);
  absl::StrAppendFormat(
      &svg,
      "<text x=\"%d\" y=\"38\" fill=\"#555\">%s, %d threads: peak FMA %.1f GFLOP/s, read %.1f "
      "GB/s; %s</text>\n",
      left, EscapeMarkup(report.machine().cpu_model()), report.limits().threads(),
      report.limits().peak_fma_gflops(), report.limits().read_gbps(),
      EscapeMarkup(report.created_at()));
  for (size_t i = 0; i < legend.drawn.size(); ++i) {
    const int lx = left + static_cast<int>(i) * 120;
    absl::StrAppendFormat(&svg,
                          "<rect x=\"%d\" y=\"48\" width=\"12\" height=\"12\" fill=\"%s\"/>"
                          "<text x=\"%d\" y=\"58\">%s</text>\n",
                          lx, kColors[i % 8], lx + 16, EscapeMarkup(legend.drawn[i]));
  }
  for (size_t i = 0; i < legend.notes.size(); ++i) {
    absl::StrAppendFormat(&svg, "<text x=\"%d\" y=\"%d\" fill=\"#777\">not run: %s</text>\n", left,
                          78 + 16 * static_cast<int>(i), EscapeMarkup(legend.notes[i]));
  }
  const int base = top_margin + plot_h;
  for (int t = 0; t <= ticks; ++t) {
    const double v = step * t;
    const int y = base - static_cast<int>(plot_h * t / ticks);
    absl::StrAppendFormat(&svg,
                          "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#ddd\"/>"
                          "<text x=\"%d\" y=\"%d\" text-anchor=\"end\">%.0f%%</text>\n",
                          left, y, width - right, y, left - 6, y + 4, v);
  }
  const int axis_y = base - plot_h / 2;
  absl::StrAppendFormat(&svg,
                        "<text x=\"20\" y=\"%d\" text-anchor=\"middle\" "
                        "transform=\"rotate(-90 20 %d)\">%% of machine limit (peak FMA or "
                        "read bandwidth)</text>\n",
                        axis_y, axis_y);
  int x = left + gap / 2;
  for (const ProblemResult& p : report.problems()) {
    for (size_t i = 0; i < legend.drawn.size(); ++i) {
      const BackendResult* r = ResultFor(p, legend.drawn[i]);
      const int bx = x + static_cast<int>(i) * bar;
      const int cx = bx + bar / 2 - 1;
      if (r == nullptr || r->status() != "ok") {
        const std::string what = r == nullptr ? "n/a" : r->status();
        absl::StrAppendFormat(&svg,
                              "<text x=\"%d\" y=\"%d\" fill=\"#999\" font-size=\"10\" "
                              "transform=\"rotate(-90 %d %d)\">%s</text>\n",
                              cx + 4, base - 4, cx + 4, base - 4, EscapeMarkup(what));
        continue;
      }
      const int h = static_cast<int>(plot_h * r->pct_of_limit() / top);
      absl::StrAppendFormat(
          &svg,
          "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"%s\"><title>%s on %s: "
          "%.3f ms, %.1f GFLOP/s, %.1f GB/s, %.1f%% of %s (%s)</title></rect>\n",
          bx, base - h, bar - 3, h, kColors[i % 8], EscapeMarkup(r->backend()),
          EscapeMarkup(p.name()), r->median_s() * 1e3, r->gflops(), r->gbps(), r->pct_of_limit(),
          p.memory_bound() ? (r->paired_read() ? "a paired read loop" : "read bandwidth")
                           : "peak FMA",
          EscapeMarkup(r->kernel()));
      // A whisker over the range the limit's spread allows (pct_of_limit_low
      // to _high: the read loop's fastest to slowest pass, or the peak's
      // highest to lowest).
      int label_y = base - h - 4;
      if (r->pct_of_limit_high() > r->pct_of_limit_low()) {
        const int y_lo = base - static_cast<int>(plot_h * r->pct_of_limit_low() / top);
        const int y_hi = base - static_cast<int>(plot_h * r->pct_of_limit_high() / top);
        absl::StrAppendFormat(&svg,
                              "<path d=\"M%d %dV%dM%d %dh6M%d %dh6\" stroke=\"#333\" "
                              "fill=\"none\"><title>%.1f-%.1f%% of the limit over its "
                              "spread</title></path>\n",
                              cx, y_lo, y_hi, cx - 3, y_lo, cx - 3, y_hi, r->pct_of_limit_low(),
                              r->pct_of_limit_high());
        label_y = std::min(label_y, y_hi - 4);
      }
      // The label, rotated, above the bar: "12.3 ms  54.8%".
      absl::StrAppendFormat(&svg,
                            "<text x=\"%d\" y=\"%d\" font-size=\"10\" "
                            "transform=\"rotate(-90 %d %d)\">%s  %.1f%%</text>\n",
                            cx + 4, label_y, cx + 4, label_y, Milliseconds(r->median_s()),
                            r->pct_of_limit());
    }
    const int mid = x + (n_bars * bar) / 2;
    absl::StrAppendFormat(&svg,
                          "<text x=\"%d\" y=\"%d\" text-anchor=\"end\" "
                          "transform=\"rotate(-30 %d %d)\">%s</text>\n"
                          "<text x=\"%d\" y=\"%d\" text-anchor=\"end\" fill=\"#777\" "
                          "font-size=\"9\" transform=\"rotate(-30 %d %d)\">%s</text>\n",
                          mid, base + 16, mid, base + 16, EscapeMarkup(p.name()), mid + 8,
                          base + 28, mid + 8, base + 28,
                          p.memory_bound() ? (p.fits_in_llc() ? "% of read bandwidth (fits in LLC)"
                                                              : "% of read bandwidth")
                                           : "% of peak FMA");
    x += group_w;
  }
  svg += "</svg>\n";
  return svg;
}

namespace {

// The limit a result's %limit is of, with its figure and spread:
// "paired read loop 38.1 GB/s (34.2-40.0)" or "peak FMA 452.0 GFLOP/s
// (lowest pass 261.7)".
std::string LimitCell(const ProblemResult& p, const BackendResult& r) {
  const std::string name = p.memory_bound()
                               ? (r.paired_read() ? "paired read loop" : "read bandwidth")
                               : (p.compute_limit().empty() ? "peak FMA" : p.compute_limit());
  if (r.status() != "ok" || r.limit_used() <= 0) return name;
  if (p.memory_bound()) {
    return absl::StrFormat("%s %.1f GB/s (%.1f-%.1f)", name, r.limit_used(), r.limit_min(),
                           r.limit_max());
  }
  return absl::StrFormat("%s %.1f GFLOP/s (lowest pass %.1f)", name, r.limit_used(), r.limit_min());
}

}  // namespace

std::string ReportToHtml(const CompareReport& report) {
  const MachineFingerprint& m = report.machine();
  const MachineLimits& l = report.limits();
  std::string html =
      "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
      "<title>attnkit compare</title>\n<style>\n"
      "body{font-family:sans-serif;margin:24px;color:#222}"
      "table{border-collapse:collapse;margin:12px 0}"
      "th,td{border:1px solid #ccc;padding:3px 8px;font-size:13px}"
      "td.n{text-align:right;font-variant-numeric:tabular-nums}"
      "tr.auto td{background:#f4f7fb}"
      "caption{text-align:left;font-weight:bold;padding:4px 0}\n"
      "</style>\n</head>\n<body>\n<h1>attnkit compare</h1>\n";
  absl::StrAppendFormat(&html, "<p>%s &mdash; attnkit %s (commit %s)</p>\n",
                        EscapeMarkup(report.created_at()), EscapeMarkup(report.attnkit().version()),
                        EscapeMarkup(report.attnkit().commit()));
  html += ReportToSvg(report);
  html +=
      "<table id=\"results\">\n<caption>Results (each output checked against the fp64 "
      "reference before it was timed)</caption>\n<thead><tr><th>problem</th><th>backend</th>"
      "<th>status</th><th>median ms</th><th>GFLOP/s</th><th>GB/s</th><th>% of limit</th>"
      "<th>limit</th><th>vs best</th><th>kernel / detail</th></tr></thead>\n<tbody>\n";
  for (const ProblemResult& p : report.problems()) {
    for (const BackendResult& r : p.results()) {
      const bool ok = r.status() == "ok";
      absl::StrAppendFormat(
          &html,
          "<tr%s><td>%s</td><td>%s</td><td>%s</td><td class=\"n\">%s</td><td class=\"n\">%s</td>"
          "<td class=\"n\">%s</td><td class=\"n\">%s</td><td>%s</td><td class=\"n\">%s</td>"
          "<td>%s</td></tr>\n",
          r.backend() == "auto" ? " class=\"auto\"" : "", EscapeMarkup(p.name()),
          EscapeMarkup(r.backend()), EscapeMarkup(r.status()),
          ok ? absl::StrFormat("%.3f", r.median_s() * 1e3) : "",
          ok ? absl::StrFormat("%.1f", r.gflops()) : "",
          ok ? absl::StrFormat("%.1f", r.gbps()) : "",
          ok ? absl::StrFormat("%.1f", r.pct_of_limit()) : "", EscapeMarkup(LimitCell(p, r)),
          ok ? absl::StrFormat("%.2f", r.speedup_vs_best()) : "",
          EscapeMarkup(ok ? (r.detail().empty() ? r.kernel()
                                                : absl::StrCat(r.detail(), " [", r.kernel(), "]"))
                          : r.detail()));
    }
  }
  html += "</tbody>\n</table>\n";
  html += "<table id=\"machine\">\n<caption>Machine (limits measured in the same run)</caption>\n";
  const std::pair<std::string, std::string> rows[] = {
      {"CPU", m.cpu_model()},
      {"threads", absl::StrCat(m.threads(), " of ", m.cores(), " cores")},
      {"Highway", absl::StrCat(m.highway_dispatched(),
                               " (compiled: ", absl::StrJoin(m.highway_targets(), ", "), ")")},
      {"peak FMA", absl::StrFormat("%.1f GFLOP/s (%s)", l.peak_fma_gflops(), l.best_target())},
      {"read bandwidth", absl::StrFormat("%.1f GB/s", l.read_gbps())},
      {"OpenBLAS sgemm", absl::StrFormat("%.1f GFLOP/s (%s kernel; %s)", l.sgemm_gflops(),
                                         l.openblas_core(), m.openblas_config())},
      {"compiler", m.compiler()},
      {"libraries", absl::StrCat("Highway ", m.highway_version(), ", Abseil ", m.abseil_version(),
                                 ", protobuf ", m.protobuf_version())},
      {"FLOP convention", report.flop_convention()},
  };
  for (const auto& [k, v] : rows) {
    absl::StrAppendFormat(&html, "<tr><th>%s</th><td>%s</td></tr>\n", EscapeMarkup(k),
                          EscapeMarkup(v));
  }
  html += "</table>\n</body>\n</html>\n";
  return html;
}

}  // namespace attnkit
