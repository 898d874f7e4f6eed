// The ring search. Hop qualities are ranked into levels (0 = slowest). A ring
// is scored by its histogram of hops per level, compared from the slowest
// level up: fewer slowest hops wins. The search splits the devices at the
// slowest level into the groups that better links join (hosts, then sockets,
// then switches, then MT-Link pairs): when there are k >= 2 groups, k slow hops
// are unavoidable and enough, so each group becomes one contiguous stretch,
// solved the same way. A group that does not split is searched exhaustively
// (branch and bound) up to kExactMax devices, else greedily with 2-opt.
#include "topo/ring.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>

#include "qk/base/env.h"
#include "qk/base/error.h"

namespace qccl::topo {

namespace {
QK_ENV_STRING(env_p2p_level, "QCCL_P2P_LEVEL", "",
              "Farthest path peer-to-peer copies may use: LOC, NVL (MTL), PIX, PXB, PHB, NODE or "
              "SYS (default); farther hops are staged through host memory.");

constexpr size_t kExactMax = 9;

using Hist = std::vector<int>;

struct Search {
  int m = 0;
  std::vector<std::vector<int>> level;  // [i][j] over member positions
  int nlevels = 0;

  Hist hist(const std::vector<int>& order, bool closed) const {
    Hist h(nlevels, 0);
    for (size_t i = 0; i + 1 < order.size(); ++i) ++h[level[order[i]][order[i + 1]]];
    if (closed && order.size() > 2) ++h[level[order.back()][order.front()]];
    if (closed && order.size() == 2) h[level[order[0]][order[1]]] += 2;
    return h;
  }

  void dfs(std::vector<int>& cur, std::vector<bool>& used, Hist& h, const std::vector<int>& set,
           bool closed, std::vector<int>& best, Hist& best_h) const {
    if (!best.empty() && h >= best_h) return;  // more hops only make it worse
    if (cur.size() == set.size()) {
      Hist full = h;
      if (closed && cur.size() > 1) ++full[level[cur.back()][cur.front()]];
      if (best.empty() || full < best_h) {
        best = cur;
        best_h = full;
      }
      return;
    }
    for (size_t k = 0; k < set.size(); ++k) {
      if (used[k]) continue;
      int l = level[cur.back()][set[k]];
      used[k] = true;
      cur.push_back(set[k]);
      ++h[l];
      dfs(cur, used, h, set, closed, best, best_h);
      --h[l];
      cur.pop_back();
      used[k] = false;
    }
  }

  std::vector<int> exact(const std::vector<int>& set, bool closed) const {
    std::vector<int> best;
    Hist best_h;
    size_t starts = closed ? 1 : set.size();  // a ring may start anywhere
    for (size_t s = 0; s < starts; ++s) {
      std::vector<int> cur{set[s]};
      std::vector<bool> used(set.size(), false);
      used[s] = true;
      Hist h(nlevels, 0);
      dfs(cur, used, h, set, closed, best, best_h);
    }
    return best;
  }

  std::vector<int> greedy(const std::vector<int>& set, bool closed) const {
    std::vector<int> best;
    Hist best_h;
    for (size_t s = 0; s < set.size(); ++s) {
      std::vector<int> cur{set[s]};
      std::vector<bool> used(set.size(), false);
      used[s] = true;
      while (cur.size() < set.size()) {
        size_t pick = set.size();
        for (size_t k = 0; k < set.size(); ++k)
          if (!used[k] && (pick == set.size() || level[cur.back()][set[k]] > level[cur.back()][set[pick]]))
            pick = k;
        used[pick] = true;
        cur.push_back(set[pick]);
      }
      // 2-opt: reverse stretches while that improves the histogram.
      Hist h = hist(cur, closed);
      for (bool improved = true; improved;) {
        improved = false;
        for (size_t i = 1; i + 1 < cur.size(); ++i)
          for (size_t j = i + 1; j < cur.size(); ++j) {
            std::reverse(cur.begin() + i, cur.begin() + j + 1);
            Hist h2 = hist(cur, closed);
            if (h2 < h) {
              h = h2;
              improved = true;
            } else {
              std::reverse(cur.begin() + i, cur.begin() + j + 1);
            }
          }
      }
      if (best.empty() || h < best_h) {
        best = cur;
        best_h = h;
      }
    }
    return best;
  }

  std::vector<int> solve(std::vector<int> set, bool closed) const {
    std::sort(set.begin(), set.end());
    if (set.size() <= 2) return set;
    int worst = nlevels, top = -1;
    for (int a : set)
      for (int b : set)
        if (a != b) {
          worst = std::min(worst, level[a][b]);
          top = std::max(top, level[a][b]);
        }
    if (worst == top) return set;  // every order is as good
    // Groups joined by links better than the slowest level (union-find).
    std::map<int, int> parent;
    for (int a : set) parent[a] = a;
    auto find = [&](int x) {
      while (parent[x] != x) x = parent[x] = parent[parent[x]];
      return x;
    };
    for (int a : set)
      for (int b : set)
        if (a < b && level[a][b] > worst && level[b][a] > worst) parent[find(a)] = find(b);
    std::map<int, std::vector<int>> groups;  // keyed by smallest member
    for (int a : set) {
      int r = find(a);
      auto it = std::find_if(groups.begin(), groups.end(),
                             [&](const auto& g) { return find(g.second.front()) == r; });
      if (it == groups.end()) groups[a] = {a};
      else it->second.push_back(a);
    }
    if (groups.size() >= 2) {
      std::vector<int> out;
      for (auto& [k, g] : groups) {
        auto part = solve(g, false);
        out.insert(out.end(), part.begin(), part.end());
      }
      return out;
    }
    return set.size() <= kExactMax ? exact(set, closed) : greedy(set, closed);
  }
};

// Ranks hop qualities: faster is better; at equal speed the nearer class.
bool worse(const Hop& a, const Hop& b) {
  if (a.gbps != b.gbps) return a.gbps < b.gbps;
  return a.cls > b.cls;
}

Search make_search(const Analysis& a, const std::vector<int>& members, P2PLevel level) {
  Search s;
  s.m = static_cast<int>(members.size());
  std::vector<Hop> distinct;
  std::vector<std::vector<Hop>> hops(s.m, std::vector<Hop>(s.m));
  for (int i = 0; i < s.m; ++i)
    for (int j = 0; j < s.m; ++j)
      if (i != j) {
        hops[i][j] = make_hop(a, members[i], members[j], level);
        distinct.push_back(hops[i][j]);
      }
  std::sort(distinct.begin(), distinct.end(), worse);
  distinct.erase(std::unique(distinct.begin(), distinct.end(),
                             [](const Hop& x, const Hop& y) { return !worse(x, y) && !worse(y, x); }),
                 distinct.end());
  s.nlevels = static_cast<int>(distinct.size());
  s.level.assign(s.m, std::vector<int>(s.m, 0));
  for (int i = 0; i < s.m; ++i)
    for (int j = 0; j < s.m; ++j)
      if (i != j)
        s.level[i][j] = static_cast<int>(
            std::lower_bound(distinct.begin(), distinct.end(), hops[i][j], worse) - distinct.begin());
  return s;
}

std::string gbps_str(double g) {
  if (std::isinf(g)) return "-";
  return fmt::format("{:g} GB/s", g);
}
}  // namespace

P2PLevel parse_p2p_level(const std::string& raw, const char* what) {
  std::string s;
  for (char c : raw) s += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (s == "LOC") return PathClass::kSelf;
  if (s == "NVL" || s == "MTL") return PathClass::kNvl;
  if (s == "PIX") return PathClass::kPix;
  if (s == "PXB") return PathClass::kPxb;
  if (s == "PHB") return PathClass::kPhb;
  if (s == "NODE") return PathClass::kNode;
  if (s == "SYS" || s.empty()) return PathClass::kSys;
  QK_THROW(qk::ValueError, what, ": expected LOC, NVL (or MTL), PIX, PXB, PHB, NODE or SYS, got '",
           raw, "'");
}

P2PLevel p2p_level_setting() { return parse_p2p_level(env_p2p_level.reload()); }

bool p2p_allowed(PathClass c, P2PLevel level) {
  return c != PathClass::kNet && c != PathClass::kNone && c <= level && level != PathClass::kSelf;
}

Hop make_hop(const Analysis& a, int from, int to, P2PLevel level) {
  const Path& p = a.path[from][to];
  Hop h;
  h.from = from;
  h.to = to;
  h.label = p.label();
  if (p.cls == PathClass::kNet) {
    h.via = "net";
    h.cls = p.cls;
    h.gbps = p.gbps;
  } else if (p2p_allowed(p.cls, level)) {
    h.via = "p2p";
    h.cls = p.cls;
    h.gbps = p.gbps;
  } else {
    h.via = "shm";
    h.cls = p.staged_cls;
    h.gbps = p.staged_gbps;
  }
  return h;
}

double Ring::min_gbps() const {
  double m = std::numeric_limits<double>::infinity();
  for (const auto& h : hops) m = std::min(m, h.gbps);
  return m;
}

Ring best_ring(const Analysis& a, const std::vector<int>& members, P2PLevel level) {
  Ring r;
  if (members.empty()) return r;
  Search s = make_search(a, members, level);
  std::vector<int> all(members.size());
  std::iota(all.begin(), all.end(), 0);
  std::vector<int> pos = s.solve(all, true);
  for (int p : pos) r.order.push_back(members[p]);
  // Canonical form: start at the smallest device, then towards the smaller neighbour.
  auto mn = std::min_element(r.order.begin(), r.order.end());
  std::rotate(r.order.begin(), mn, r.order.end());
  if (r.order.size() > 2 && r.order[1] > r.order.back()) std::reverse(r.order.begin() + 1, r.order.end());
  if (r.order.size() > 1)
    for (size_t i = 0; i < r.order.size(); ++i)
      r.hops.push_back(make_hop(a, r.order[i], r.order[(i + 1) % r.order.size()], level));
  return r;
}

std::vector<int> best_path(const Analysis& a, const std::vector<int>& members, P2PLevel level) {
  if (members.empty()) return {};
  Search s = make_search(a, members, level);
  std::vector<int> all(members.size());
  std::iota(all.begin(), all.end(), 0);
  std::vector<int> out;
  for (int p : s.solve(all, false)) out.push_back(members[p]);
  if (out.size() > 1 && out.front() > out.back()) std::reverse(out.begin(), out.end());
  return out;
}

std::string format_ring(const Analysis& a, const Ring& r) {
  if (r.order.empty()) return "ring: no GPU devices\n";
  std::string s = "ring:";
  for (int d : r.order) s += " " + a.devices[d].label;
  if (r.hops.empty()) return s + " (one device, no hops)\n";
  s += fmt::format(" (slowest hop {})\n", gbps_str(r.min_gbps()));
  std::map<std::string, int> count;
  for (const auto& h : r.hops) {
    s += fmt::format("  {:>6} -> {:<6} {:<5} {:<4} {}\n", a.devices[h.from].label, a.devices[h.to].label,
                     h.label, h.via, gbps_str(h.gbps));
    ++count[h.label + (h.via == "shm" ? " (shm)" : "")];
  }
  s += "  hops:";
  for (const auto& [k, v] : count) s += fmt::format(" {} x{}", k, v);
  return s + "\n";
}

HierPlan plan_hierarchical(const std::vector<int>& host_of,
                           const std::vector<std::vector<int>>& local_rings) {
  HierPlan p;
  p.local_rings = local_rings;
  size_t hosts = local_rings.size();
  if (hosts <= 1) {
    p.why_not = "one host: the flat algorithms apply";
    return p;
  }
  size_t per = local_rings[0].size();
  for (size_t h = 0; h < hosts; ++h)
    if (local_rings[h].size() != per) {
      p.why_not = fmt::format("hosts have different numbers of ranks ({} on host 0, {} on host {})",
                              per, local_rings[h].size(), h);
      return p;
    }
  std::vector<std::vector<int>> by_host(hosts);
  for (size_t r = 0; r < host_of.size(); ++r) by_host[host_of[r]].push_back(static_cast<int>(r));
  p.groups.assign(per, {});
  for (size_t i = 0; i < per; ++i)
    for (size_t h = 0; h < hosts; ++h) p.groups[i].push_back(by_host[h][i]);
  p.usable = true;
  return p;
}

HierPlan plan_for_topology(const Analysis& a, P2PLevel level) {
  std::vector<int> gpus = a.gpus();
  std::vector<int> host_of;
  std::map<int, int> host_num;  // topology host -> plan host
  std::vector<std::vector<int>> dev_by_host;
  for (int d : gpus) {
    int th = a.devices[d].host;
    if (!host_num.count(th)) {
      host_num[th] = static_cast<int>(dev_by_host.size());
      dev_by_host.push_back({});
    }
    host_of.push_back(host_num[th]);
    dev_by_host[host_num[th]].push_back(d);
  }
  std::vector<std::vector<int>> rings;
  for (auto& devs : dev_by_host) {
    std::vector<int> ring;
    for (int d : best_path(a, devs, level))
      ring.push_back(static_cast<int>(std::find(gpus.begin(), gpus.end(), d) - gpus.begin()));
    rings.push_back(ring);
  }
  return plan_hierarchical(host_of, rings);
}

std::string format_plan(const HierPlan& p, const std::function<std::string(int, int)>& label) {
  auto seq = [&](const std::vector<int>& ranks, bool closed) {
    std::string s;
    for (size_t i = 0; i < ranks.size(); ++i) {
      s += fmt::format("{}", ranks[i]);
      if (i + 1 < ranks.size() || (closed && ranks.size() > 1)) {
        int to = ranks[(i + 1) % ranks.size()];
        std::string l = label(ranks[i], to);
        s += l.empty() ? " -> " : fmt::format(" -{}-> ", l);
      }
    }
    if (closed && ranks.size() > 1) s += fmt::format("{}", ranks[0]);
    return s;
  };
  if (!p.usable) return fmt::format("hierarchical all-reduce: not used: {}\n", p.why_not);
  size_t hosts = p.local_rings.size(), per = p.local_rings[0].size();
  std::string s = fmt::format("hierarchical all-reduce: {} hosts x {} ranks\n", hosts, per);
  s += fmt::format("  1. reduce-scatter inside each host along its ring ({} blocks of 1/{}):\n", per, per);
  for (size_t h = 0; h < hosts; ++h) s += fmt::format("       host {}: {}\n", h, seq(p.local_rings[h], true));
  s += fmt::format("  2. all-reduce of block i across hosts, ring over the i-th rank of each host ({} of the data each):\n",
                   per == 1 ? std::string("all") : fmt::format("1/{}", per));
  for (size_t i = 0; i < p.groups.size(); ++i)
    s += fmt::format("       block {}: {}\n", i, seq(p.groups[i], true));
  s += "  3. all-gather inside each host along the same rings\n";
  return s;
}

}  // namespace qccl::topo
