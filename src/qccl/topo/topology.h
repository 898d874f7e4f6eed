// The machine model qccl plans communication on: hosts, each a graph of CPU
// packages, NUMA nodes, PCI host bridges and switches, and devices (GPUs and
// NICs), joined by typed links with a bandwidth; network links join NICs of
// different hosts. It comes from detection (detect.h) or from a topology file
// (topo_file.h, schema in docs/topology.md), and analyze() turns it into the
// device-to-device path classes `qk topo -m` prints and the ring search uses.
//
//   Topology t = load_topology_file("box.json");
//   Analysis a = analyze(t);
//   a.path[0][1].label()   // "MTL4", "PIX", "SYS", "NET", ...
#pragma once

#include <string>
#include <vector>

namespace qccl::topo {

enum class NodeType { kPackage, kNuma, kHostBridge, kPciSwitch, kGpu, kNic };
enum class LinkType { kNvLink, kMtLink, kPcie, kHostBridge, kInterSocket, kNetwork };

const char* node_type_name(NodeType t);  // "package", "numa", ... (the file's spelling)
const char* link_type_name(LinkType t);  // "nvlink", "mtlink", "pcie", ...
// Default bandwidth in GB/s of one link of this type when a file gives none.
double default_link_gbps(LinkType t);

struct Node {
  std::string id;       // unique within its host
  NodeType type = NodeType::kGpu;
  int index = -1;       // gpu/nic: device number on the host; numa: OS index; package: socket
  std::string name;     // model or interface name ("NVIDIA H200", "eth0")
  std::string pci;      // bus id, "0000:1a:00.0"
  std::string cpus;     // numa: its CPUs as a list ("0-31,64-95")
  std::string package;  // numa: id of its package node
};

struct Link {
  std::string a, b;  // node ids (within the host; network links: "host/node")
  LinkType type = LinkType::kPcie;
  double gbps = 0;   // bandwidth of the whole link (all `count` lanes/links)
  int count = 1;     // nvlink/mtlink: links bonded between the pair (the # of NV#)
};

struct Host {
  std::string name;
  std::vector<Node> nodes;
  std::vector<Link> links;
};

struct Topology {
  std::vector<Host> hosts;
  std::vector<Link> network;  // between NICs of different hosts
  std::string source;         // "hwloc", "hwloc+nvml", or the file it was read from
};

// Checks a model made in code or read from a file: unique ids, links naming
// existing nodes, a PCI tree without cycles, every device reachable. Throws
// qk::ValueError naming the host, node or link at fault.
void validate(const Topology& t);

// How two devices reach each other, best first (the order of QCCL_P2P_LEVEL).
enum class PathClass { kSelf, kNvl, kPix, kPxb, kPhb, kNode, kSys, kNet, kNone };
const char* path_class_name(PathClass c);  // "X", "NVL", "PIX", ..., "NET"

struct Path {
  PathClass cls = PathClass::kNone;
  double gbps = 0;      // bottleneck bandwidth along the path
  int links = 0;        // kNvl: bonded links
  bool mtlink = false;  // kNvl over MT-Link rather than NVLink
  // Same host: class and bandwidth of a copy staged through host memory (the
  // PCI tree and the inter-socket link, never NVLink), for QCCL_P2P_LEVEL.
  PathClass staged_cls = PathClass::kNone;
  double staged_gbps = 0;
  std::string label() const;  // "X", "NV4", "MTL4", "PIX", ...
};

// A GPU or NIC of the topology with what the matrix shows about it.
struct Device {
  int host = 0;           // index into Topology::hosts
  int node = 0;           // index into that host's nodes
  NodeType type = NodeType::kGpu;
  std::string label;      // "GPU0", "NIC1" (numbered across hosts when there are several)
  std::string name;
  int numa = -1;          // OS index of the NUMA node it hangs off, -1 if unknown
  std::string cpus;       // that node's CPUs
  double cpu_gbps = 0;    // bottleneck bandwidth to its NUMA node (host-staged copies)
};

struct Analysis {
  std::vector<Device> devices;         // GPUs (host by host), then NICs
  std::vector<std::vector<Path>> path; // [i][j] over devices
  std::vector<int> gpus() const;       // indices of the GPUs in devices
  std::vector<int> nics() const;
};

// Validates, then computes every device pair's path class and bandwidth.
Analysis analyze(const Topology& t);

}  // namespace qccl::topo
