// The rc-sim chart: one self-contained SVG, readable without hunting for a legend.
//
// Time runs left to right. Up to chart.max_rows requests, every request is a row, grouped by key:
// an arrival tick, a bar for each wait coloured by the gate it waited in (the service time in
// grey), and an outcome mark where it ended (served, refused, abandoned, failed), with the outcome
// spelled out at the right. Fixed windows of windowed gates are drawn as brackets above their key
// group (or above everything for an unkeyed gate) with dashed boundaries through the rows. Past
// max_rows the rows collapse into a density view: per key group, how many requests were waiting
// in each gate over time (stacked) and how many ended each way per time slice. The legend sits
// in the header, next to the summary line. Output is byte-identical for the same run.
#pragma once

#include <ostream>

#include "report.hpp"
#include "runner.hpp"
#include "scenario.hpp"

namespace rc::sim {

void write_svg(std::ostream& out, const scenario& s, const run_report& r, const summary& sum);

}  // namespace rc::sim
