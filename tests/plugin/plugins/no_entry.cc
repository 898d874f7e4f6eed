// A shared library that is not a qianka extension (no QK_EXTENSION block).
extern "C" int qk_test_not_an_extension() { return 42; }
