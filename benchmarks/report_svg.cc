#include "benchmarks/report_svg.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace attnkit {
namespace {

std::string Escape(const std::string& s) {
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

constexpr const char* kColors[] = {"#4e79a7", "#f28e2b", "#59a14f", "#e15759",
                                   "#76b7b2", "#edc948", "#b07aa1", "#9c755f"};

}  // namespace

std::string ReportToSvg(const CompareReport& report) {
  // Backends in order of first appearance, each with a fixed colour.
  std::vector<std::string> backends;
  for (const ProblemResult& p : report.problems()) {
    for (const BackendResult& r : p.results()) {
      if (std::find(backends.begin(), backends.end(), r.backend()) == backends.end()) {
        backends.push_back(r.backend());
      }
    }
  }
  double top = 10;
  for (const ProblemResult& p : report.problems()) {
    for (const BackendResult& r : p.results()) top = std::max(top, r.pct_of_limit());
  }
  top = std::min(100.0, std::ceil(top / 10) * 10);
  const int bar = 18, gap = 28, left = 70, plot_h = 320, top_margin = 80;
  const int group_w = static_cast<int>(backends.size()) * bar + gap;
  const int width = std::max(900, left + group_w * report.problems_size() + 40);
  const int height = top_margin + plot_h + 150;
  std::string svg = absl::StrFormat(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
      "font-family=\"sans-serif\" font-size=\"11\">\n<rect width=\"100%%\" height=\"100%%\" "
      "fill=\"white\"/>\n",
      width, height);
  absl::StrAppendFormat(
      &svg,
      "<text x=\"%d\" y=\"20\" font-size=\"14\" font-weight=\"bold\">attnkit compare: %% of "
      "machine limit (peak FMA %.0f GFLOP/s, read %.0f GB/s, %d threads)</text>\n",
      left, report.limits().peak_fma_gflops(), report.limits().read_gbps(),
      report.limits().threads());
  absl::StrAppendFormat(&svg, "<text x=\"%d\" y=\"38\" fill=\"#555\">%s; %s</text>\n", left,
                        Escape(report.machine().cpu_model()), Escape(report.created_at()));
  const int base = top_margin + plot_h;
  for (int t = 0; t <= 5; ++t) {
    const double v = top * t / 5;
    const int y = base - static_cast<int>(plot_h * t / 5);
    absl::StrAppendFormat(&svg,
                          "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#ddd\"/>"
                          "<text x=\"%d\" y=\"%d\" text-anchor=\"end\">%.0f%%</text>\n",
                          left, y, width - 20, y, left - 6, y + 4, v);
  }
  int x = left + gap / 2;
  for (const ProblemResult& p : report.problems()) {
    for (size_t i = 0; i < backends.size(); ++i) {
      const BackendResult* r = nullptr;
      for (const BackendResult& candidate : p.results()) {
        if (candidate.backend() == backends[i]) r = &candidate;
      }
      const int bx = x + static_cast<int>(i) * bar;
      if (r == nullptr || r->status() != "ok") {
        const std::string what = r == nullptr ? "n/a" : r->status();
        absl::StrAppendFormat(&svg,
                              "<text x=\"%d\" y=\"%d\" fill=\"#999\" font-size=\"9\" "
                              "transform=\"rotate(-90 %d %d)\">%s</text>\n",
                              bx + 12, base - 4, bx + 12, base - 4, Escape(what));
        continue;
      }
      const int h = static_cast<int>(plot_h * std::min(r->pct_of_limit(), top) / top);
      absl::StrAppendFormat(
          &svg,
          "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"%s\"><title>%s on %s: "
          "%.3f ms, %.1f GFLOP/s, %.1f GB/s, %.1f%% of limit (%s)</title></rect>\n",
          bx, base - h, bar - 2, h, kColors[i % 8], Escape(r->backend()), Escape(p.name()),
          r->median_s() * 1e3, r->gflops(), r->gbps(), r->pct_of_limit(), Escape(r->kernel()));
      absl::StrAppendFormat(&svg,
                            "<text x=\"%d\" y=\"%d\" font-size=\"9\" text-anchor=\"middle\">%.0f"
                            "</text>\n",
                            bx + bar / 2 - 1, base - h - 3, r->pct_of_limit());
    }
    absl::StrAppendFormat(&svg,
                          "<text x=\"%d\" y=\"%d\" text-anchor=\"end\" "
                          "transform=\"rotate(-35 %d %d)\">%s</text>\n",
                          x + group_w / 2, base + 16, x + group_w / 2, base + 16, Escape(p.name()));
    x += group_w;
  }
  for (size_t i = 0; i < backends.size(); ++i) {
    const int lx = left + static_cast<int>(i) * 150;
    absl::StrAppendFormat(&svg,
                          "<rect x=\"%d\" y=\"%d\" width=\"12\" height=\"12\" fill=\"%s\"/>"
                          "<text x=\"%d\" y=\"%d\">%s</text>\n",
                          lx, 48, kColors[i % 8], lx + 16, 58, Escape(backends[i]));
  }
  svg += "</svg>\n";
  return svg;
}

}  // namespace attnkit
