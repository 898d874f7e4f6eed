// Links the installed NCCL backend; host buffers still go through qccl.
#include <cstdio>

#include "qccl.h"

int main() {
  int version = 0;
  qcclGetVersion(&version);
  std::printf("qccl %d with the NCCL backend linked\n", version);
  return version > 0 ? 0 : 1;
}
