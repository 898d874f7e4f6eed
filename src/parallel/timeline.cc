// Timeline spans, idle time and the bubble, and the Chrome trace of every rank.
#include "qk/parallel/timeline.h"

#include <time.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <iomanip>
#include <limits>
#include <sstream>

#include "qk/base/error.h"
#include "qk/base/file_io.h"

namespace qk::parallel {

const char* span_kind_name(SpanKind k) {
  switch (k) {
    case SpanKind::forward: return "forward";
    case SpanKind::backward: return "backward";
    case SpanKind::send: return "send";
    case SpanKind::recv: return "recv";
    case SpanKind::optimizer: return "optimizer";
    case SpanKind::idle: return "idle";
    case SpanKind::collective: return "collective";
  }
  return "?";
}

Timeline::Timeline(int rank, std::string label) : rank_(rank), label_(std::move(label)) {
  if (label_.empty()) label_ = "rank " + std::to_string(rank_);
}

double Timeline::now_us() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);  // one clock for every process of the host
  return static_cast<double>(ts.tv_sec) * 1e6 + static_cast<double>(ts.tv_nsec) * 1e-3;
}

void Timeline::begin_step() { steps_.push_back({now_us(), -1}); }

void Timeline::end_step() {
  QK_CHECK(!steps_.empty() && steps_.back().end_us < 0, "Timeline::end_step without begin_step");
  steps_.back().end_us = now_us();
}

void Timeline::add_step(StepWindow w) {
  QK_CHECK(w.end_us >= w.start_us, "Timeline::add_step: the window ends (", w.end_us, ") before it starts (",
           w.start_us, ")");
  steps_.push_back(w);
}

StepWindow Timeline::last_step() const {
  QK_CHECK(!steps_.empty() && steps_.back().end_us >= 0, "Timeline: no finished step (begin_step .. end_step)");
  return steps_.back();
}

void Timeline::clear() {
  spans_.clear();
  steps_.clear();
}

SpanScope::SpanScope(Timeline* t, SpanKind kind, std::string name, int chunk, int64_t microbatch) : t_(t) {
  if (!t_) return;
  s_.kind = kind;
  s_.name = std::move(name);
  s_.chunk = chunk;
  s_.microbatch = microbatch;
  s_.start_us = Timeline::now_us();
}

SpanScope::~SpanScope() {
  if (!t_) return;
  s_.end_us = Timeline::now_us();
  t_->add(std::move(s_));
}

// ---- idle time and the bubble ----

namespace {

bool is_compute(SpanKind k) {
  return k == SpanKind::forward || k == SpanKind::backward || k == SpanKind::optimizer;
}

// The compute spans clipped to the window, merged where they overlap, in order.
std::vector<StepWindow> busy_intervals(const Timeline& t, StepWindow w) {
  std::vector<StepWindow> iv;
  for (const Span& s : t.spans()) {
    if (!is_compute(s.kind)) continue;
    const double a = std::max(s.start_us, w.start_us), b = std::min(s.end_us, w.end_us);
    if (b > a) iv.push_back({a, b});
  }
  std::sort(iv.begin(), iv.end(), [](const StepWindow& x, const StepWindow& y) { return x.start_us < y.start_us; });
  std::vector<StepWindow> merged;
  for (const StepWindow& x : iv) {
    if (!merged.empty() && x.start_us <= merged.back().end_us)
      merged.back().end_us = std::max(merged.back().end_us, x.end_us);
    else
      merged.push_back(x);
  }
  return merged;
}

}  // namespace

std::vector<Span> idle_spans(const Timeline& t, StepWindow w) {
  std::vector<Span> out;
  double cursor = w.start_us;
  auto gap = [&](double until) {
    if (until > cursor) out.push_back(Span{SpanKind::idle, cursor, until, "idle", -1, -1});
  };
  for (const StepWindow& b : busy_intervals(t, w)) {
    gap(b.start_us);
    cursor = b.end_us;
  }
  gap(w.end_us);
  return out;
}

BubbleStats measure_bubble(const Timeline& t, StepWindow w) {
  BubbleStats b;
  b.step_us = std::max(0.0, w.end_us - w.start_us);
  for (const StepWindow& x : busy_intervals(t, w)) b.compute_us += x.end_us - x.start_us;
  b.idle_us = b.step_us - b.compute_us;
  b.fraction = b.step_us > 0 ? b.idle_us / b.step_us : 0.0;
  return b;
}

StepWindow common_window(const Timeline& t, dist::ProcessGroup& group) {
  const StepWindow mine = t.last_step();
  Tensor v = from_vector<double>({-mine.start_us, mine.end_us}, {2});
  group.all_reduce(v, dist::ReduceOp::max);
  return {-v.data_ptr<double>()[0], v.data_ptr<double>()[1]};
}

double theoretical_bubble_fraction(int p, int64_t m, int v) {
  QK_CHECK(p >= 1 && m >= 1 && v >= 1, "theoretical_bubble_fraction: sizes must be >= 1 (p ", p, ", m ", m, ", v ", v,
           ")");
  // The fill and drain take (p-1)/v forward+backward times beside m of work
  // (Narayanan et al. 2021, section 2.2: (1/v)(p-1)/m of the ideal time), so
  // of the whole step (p-1)/(v m + p - 1); for v = 1 this is (p-1)/(m+p-1).
  // The replay of this very schedule gives exactly that (tests/sim).
  const double fill = static_cast<double>(p - 1);
  return fill / (static_cast<double>(v) * static_cast<double>(m) + fill);
}

// ---- gathering ----

std::string Timeline::serialize() const {
  std::ostringstream os;
  os << std::setprecision(17);
  std::string label = label_;
  std::replace(label.begin(), label.end(), '\n', ' ');
  os << rank_ << '\n' << label << '\n';
  for (const StepWindow& w : steps_) os << "S " << w.start_us << ' ' << w.end_us << '\n';
  for (const Span& s : spans_) {
    std::string name = s.name;
    std::replace(name.begin(), name.end(), '\n', ' ');
    os << "P " << static_cast<int>(s.kind) << ' ' << s.start_us << ' ' << s.end_us << ' ' << s.chunk << ' '
       << s.microbatch << ' ' << name << '\n';
  }
  return os.str();
}

Timeline Timeline::deserialize(const std::string& bytes) {
  std::istringstream is(bytes);
  std::string line;
  Timeline t;
  QK_CHECK(std::getline(is, line), "Timeline::deserialize: empty input");
  t.rank_ = std::stoi(line);
  std::getline(is, t.label_);
  while (std::getline(is, line)) {
    std::istringstream ls(line);
    char tag = 0;
    ls >> tag;
    if (tag == 'S') {
      StepWindow w;
      ls >> w.start_us >> w.end_us;
      t.steps_.push_back(w);
    } else if (tag == 'P') {
      Span s;
      int kind = 0;
      ls >> kind >> s.start_us >> s.end_us >> s.chunk >> s.microbatch;
      QK_CHECK(ls && kind >= 0 && kind <= static_cast<int>(SpanKind::collective), "Timeline::deserialize: bad span '",
               line, "'");
      s.kind = static_cast<SpanKind>(kind);
      std::getline(ls >> std::ws, s.name);
      t.spans_.push_back(std::move(s));
    }
  }
  return t;
}

std::vector<Timeline> gather_timelines(const Timeline& mine, dist::ProcessGroup& group) {
  const std::string bytes = mine.serialize();
  const int n = group.size();
  Tensor len = from_vector<int64_t>({static_cast<int64_t>(bytes.size())}, {1});
  Tensor lens = empty({n}, TensorOptions(DType::i64));
  group.all_gather(lens, len);
  int64_t longest = 0;
  for (int r = 0; r < n; ++r) longest = std::max(longest, lens.data_ptr<int64_t>()[r]);
  Tensor buf = zeros({std::max<int64_t>(longest, 1)}, TensorOptions(DType::u8));
  std::memcpy(buf.raw_data(), bytes.data(), bytes.size());
  Tensor all = empty({n * buf.numel()}, TensorOptions(DType::u8));
  group.all_gather(all, buf);
  std::vector<Timeline> out;
  if (group.rank() != 0) return out;
  const char* base = static_cast<const char*>(all.raw_data());
  for (int r = 0; r < n; ++r)
    out.push_back(Timeline::deserialize(
        std::string(base + r * buf.numel(), static_cast<size_t>(lens.data_ptr<int64_t>()[r]))));
  return out;
}

// ---- the Chrome trace ----

namespace {

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char hex[8];
          std::snprintf(hex, sizeof hex, "\\u%04x", c);
          out += hex;
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

int thread_id(SpanKind k) { return static_cast<int>(k) + 1; }

}  // namespace

std::string chrome_trace_json(const std::vector<Timeline>& timelines) {
  double origin = std::numeric_limits<double>::infinity();
  for (const Timeline& t : timelines) {
    for (const Span& s : t.spans()) origin = std::min(origin, s.start_us);
    for (const StepWindow& w : t.steps()) origin = std::min(origin, w.start_us);
  }
  if (!std::isfinite(origin)) origin = 0;
  std::ostringstream os;
  os << std::fixed << std::setprecision(3);
  os << "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n";
  bool first = true;
  auto sep = [&] {
    if (!first) os << ",\n";
    first = false;
  };
  for (const Timeline& t : timelines) {
    sep();
    os << "{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": " << t.rank()
       << ", \"args\": {\"name\": " << json_string(t.label()) << "}}";
    sep();
    os << "{\"name\": \"process_sort_index\", \"ph\": \"M\", \"pid\": " << t.rank()
       << ", \"args\": {\"sort_index\": " << t.rank() << "}}";
    for (SpanKind k : kAllSpanKinds) {
      sep();
      os << "{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": " << t.rank() << ", \"tid\": " << thread_id(k)
         << ", \"args\": {\"name\": \"" << span_kind_name(k) << "\"}}";
    }
    std::vector<Span> spans = t.spans();
    for (const StepWindow& w : t.steps())
      if (w.end_us >= w.start_us)
        for (Span& idle : idle_spans(t, w)) spans.push_back(std::move(idle));
    for (const Span& s : spans) {
      sep();
      os << "{\"name\": " << json_string(s.name) << ", \"cat\": \"" << span_kind_name(s.kind)
         << "\", \"ph\": \"X\", \"pid\": " << t.rank() << ", \"tid\": " << thread_id(s.kind)
         << ", \"ts\": " << s.start_us - origin << ", \"dur\": " << std::max(0.0, s.duration_us());
      os << ", \"args\": {\"chunk\": " << s.chunk << ", \"microbatch\": " << s.microbatch << "}}";
    }
  }
  os << "\n]}\n";
  return os.str();
}

void write_chrome_trace(const std::string& path, const std::vector<Timeline>& timelines) {
  atomic_write_file(path, chrome_trace_json(timelines));
}

}  // namespace qk::parallel
