#include <gtest/gtest.h>
#include "harness/op_harness.h"
TEST(OpHarness, Placeholder) {}
