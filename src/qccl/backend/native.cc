// The native backend: qccl's own algorithms over its engine (algo/).
#include "backend/backend.h"

namespace qccl {

namespace {

class NativeBackend final : public Backend {
 public:
  explicit NativeBackend(qcclComm& c) : c_(c) {}
  const char* name() const override { return "native"; }
  void all_reduce(const void* s, void* r, size_t n, qcclDataType_t t, qcclRedOp_t op, void*) override {
    qccl::all_reduce(c_, s, r, n, t, op);
  }
  void broadcast(const void* s, void* r, size_t n, qcclDataType_t t, int root, void*) override {
    qccl::broadcast(c_, s, r, n, t, root);
  }
  void reduce(const void* s, void* r, size_t n, qcclDataType_t t, qcclRedOp_t op, int root,
              void*) override {
    reduce_to_root(c_, s, r, n, t, op, root);
  }
  void all_gather(const void* s, void* r, size_t n, qcclDataType_t t, void*) override {
    qccl::all_gather(c_, s, r, n, t);
  }
  void reduce_scatter(const void* s, void* r, size_t n, qcclDataType_t t, qcclRedOp_t op,
                      void*) override {
    qccl::reduce_scatter(c_, s, r, n, t, op);
  }
  void all_to_all(const void* s, void* r, size_t n, qcclDataType_t t, void*) override {
    qccl::all_to_all(c_, s, r, n, t);
  }
  void all_to_all_v(const void* s, void* r, const VBlocks& v, qcclDataType_t t, void*) override {
    qccl::all_to_all_v(c_, s, r, v, t);
  }
  void point_to_point(std::span<const P2POp> ops, void*) override { qccl::point_to_point(c_, ops); }

 private:
  qcclComm& c_;
};

}  // namespace

std::unique_ptr<Backend> make_native_backend(qcclComm& c) { return std::make_unique<NativeBackend>(c); }

}  // namespace qccl
