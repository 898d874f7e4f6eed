// The CIFAR-10 download against a local HTTP server (python3 -m http.server on
// 127.0.0.1, a free port, killed by the test) serving generated archives.
#include "qk/data/download.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include "common/reference_tool.h"
#include "data/test_util.h"
#include "qk/base/error.h"
#include "qk/base/file_io.h"
#include "qk/data/cifar10.h"

namespace {

namespace fs = std::filesystem;
using qk::test::TempDir;

int free_port() {
  const int s = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  socklen_t len = sizeof a;
  if (::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      ::getsockname(s, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    ::close(s);
    return -1;
  }
  ::close(s);
  return ntohs(a.sin_port);
}

bool can_connect(int port) {
  const int s = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<uint16_t>(port));
  const bool ok = ::connect(s, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  ::close(s);
  return ok;
}

// `python3 -m http.server` serving `dir` on 127.0.0.1; under `timeout 120`
// so it cannot outlive a crashed test; stopped by the destructor.
class LocalHttpServer {
 public:
  explicit LocalHttpServer(const std::string& dir) {
    for (int attempt = 0; attempt < 3 && port_ < 0; ++attempt) {
      const int port = free_port();
      if (port <= 0) continue;
      const pid_t pid = ::fork();
      if (pid == 0) {
        const int null = ::open("/dev/null", O_WRONLY);
        ::dup2(null, 1);
        ::dup2(null, 2);
        const std::string p = std::to_string(port);
        ::execlp("timeout", "timeout", "120", "python3", "-m", "http.server", p.c_str(), "--bind", "127.0.0.1",
                 "--directory", dir.c_str(), static_cast<char*>(nullptr));
        ::_exit(127);
      }
      pid_ = pid;
      // Up to 15 s for the interpreter to start listening.
      for (int i = 0; i < 300; ++i) {
        if (can_connect(port)) {
          port_ = port;
          break;
        }
        int status;
        if (::waitpid(pid_, &status, WNOHANG) == pid_) {  // exited: no python3, or the port was taken
          pid_ = -1;
          break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
      if (port_ < 0) stop();
    }
  }
  ~LocalHttpServer() { stop(); }
  bool ok() const { return port_ > 0; }
  std::string url(const std::string& file) const {
    return "http://127.0.0.1:" + std::to_string(port_) + "/" + file;
  }

 private:
  void stop() {
    if (pid_ > 0) {
      ::kill(pid_, SIGTERM);
      int status;
      ::waitpid(pid_, &status, 0);
      pid_ = -1;
    }
  }
  pid_t pid_ = -1;
  int port_ = -1;
};

// A served folder holding cifar-10-binary.tar.gz made from a small synthetic
// set (optionally with a file removed), like the official archive's layout.
struct Served {
  TempDir src, www, dest;
  std::string archive;
  Served(const std::string& name, const std::string& drop_file = "")
      : src(name + "_src"), www(name + "_www"), dest(name + "_dest") {
    const std::string dir = qk::data::synth_cifar(src.path(), {.num_train = 20, .num_test = 10, .seed = 2});
    if (!drop_file.empty()) fs::remove(dir + "/" + drop_file);
    archive = www / "cifar-10-binary.tar.gz";
    const std::string cmd = "tar czf '" + archive + "' -C '" + src.path() + "' cifar-10-batches-bin";
    if (std::system(cmd.c_str()) != 0) archive.clear();
  }
};

// Only the published folder may be left in dest: no temporary download dir.
std::vector<std::string> entries(const std::string& dir) {
  std::vector<std::string> v;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) v.push_back(e.path().filename().string());
  std::sort(v.begin(), v.end());
  return v;
}

class Download : public ::testing::Test {
 protected:
  void SetUp() override {
    ::setenv("no_proxy", "127.0.0.1,localhost", 1);  // never route the local server through a proxy
    ::unsetenv("QK_CIFAR10_URL");
    ::unsetenv("QK_CIFAR10_MD5");
  }
};

#define START_SERVER(server, dir)                                                     \
  LocalHttpServer server(dir);                                                        \
  if (!server.ok()) QK_MISSING_REFERENCE_TOOL("could not start `python3 -m http.server` (python3 missing?)")

TEST_F(Download, FetchesVerifiesAndUnpacks) {
  Served s("dl_ok");
  ASSERT_FALSE(s.archive.empty()) << "tar failed";
  START_SERVER(server, s.www.path());
  qk::data::DownloadOptions o;
  o.url = server.url("cifar-10-binary.tar.gz");
  o.md5 = qk::data::md5_file(s.archive);
  const std::string dir = qk::data::download_cifar10(s.dest.path(), o);
  EXPECT_EQ(dir, s.dest / "cifar-10-batches-bin");
  EXPECT_EQ(entries(s.dest.path()), std::vector<std::string>{"cifar-10-batches-bin"});
  for (const auto& f : qk::data::cifar10_file_names())
    EXPECT_EQ(qk::read_file(dir + "/" + f), qk::read_file(s.src.path() + "/cifar-10-batches-bin/" + f)) << f;
  EXPECT_EQ(qk::data::load_cifar10(s.dest.path()).train.size(), 20);
  // Present and valid: a second call fetches nothing (a dead URL is fine).
  o.url = "http://127.0.0.1:1/nothing.tar.gz";
  EXPECT_EQ(qk::data::download_cifar10(s.dest.path(), o), dir);
}

TEST_F(Download, WrongChecksumIsRefusedAndNothingIsLeftBehind) {
  Served s("dl_md5");
  ASSERT_FALSE(s.archive.empty());
  START_SERVER(server, s.www.path());
  qk::data::DownloadOptions o;
  o.url = server.url("cifar-10-binary.tar.gz");  // the official MD5 cannot match a generated archive
  try {
    qk::data::download_cifar10(s.dest.path(), o);
    ADD_FAILURE() << "expected a checksum error";
  } catch (const qk::IoError& e) {
    const std::string m = e.message();
    EXPECT_NE(m.find("checksum mismatch"), std::string::npos) << m;
    EXPECT_NE(m.find(qk::data::md5_file(s.archive)), std::string::npos) << m;
    EXPECT_NE(m.find(qk::data::kCifar10Md5), std::string::npos) << m;
    EXPECT_NE(m.find("nothing was unpacked"), std::string::npos) << m;
  }
  EXPECT_TRUE(entries(s.dest.path()).empty());
  EXPECT_FALSE(qk::data::cifar10_present(s.dest.path()));
}

TEST_F(Download, UrlAndChecksumComeFromTheEnvironment) {
  Served s("dl_env");
  ASSERT_FALSE(s.archive.empty());
  START_SERVER(server, s.www.path());
  ::setenv("QK_CIFAR10_URL", server.url("cifar-10-binary.tar.gz").c_str(), 1);
  ::setenv("QK_CIFAR10_MD5", "00000000000000000000000000000000", 1);
  EXPECT_THROW(qk::data::download_cifar10(s.dest.path()), qk::IoError);  // env URL used, env MD5 wrong
  EXPECT_TRUE(entries(s.dest.path()).empty());
  ::setenv("QK_CIFAR10_MD5", qk::data::md5_file(s.archive).c_str(), 1);
  qk::data::download_cifar10(s.dest.path());
  EXPECT_TRUE(qk::data::cifar10_present(s.dest.path()));
}

TEST_F(Download, HttpErrorsAndUnreachableServersAreClear) {
  Served s("dl_404");
  START_SERVER(server, s.www.path());
  qk::data::DownloadOptions o;
  o.url = server.url("no-such-file.tar.gz");
  try {
    qk::data::download_cifar10(s.dest.path(), o);
    ADD_FAILURE() << "expected an HTTP error";
  } catch (const qk::IoError& e) {
    EXPECT_NE(std::string(e.message()).find("HTTP 404"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(entries(s.dest.path()).empty());
  o.url = "http://127.0.0.1:" + std::to_string(free_port()) + "/x.tar.gz";  // nobody listens
  o.stall_timeout_s = 5;
  EXPECT_THROW(qk::data::download_cifar10(s.dest.path(), o), qk::IoError);
  o.url = "ftp://127.0.0.1/x.tar.gz";
  EXPECT_THROW(qk::data::download_cifar10(s.dest.path(), o), qk::ValueError);
  o.url = server.url("cifar-10-binary.tar.gz");
  o.md5 = "not-hex";
  EXPECT_THROW(qk::data::download_cifar10(s.dest.path(), o), qk::ValueError);
  EXPECT_TRUE(entries(s.dest.path()).empty());
}

TEST_F(Download, IncompleteArchiveIsRefusedAfterUnpacking) {
  Served s("dl_incomplete", "data_batch_4.bin");
  ASSERT_FALSE(s.archive.empty());
  START_SERVER(server, s.www.path());
  qk::data::DownloadOptions o;
  o.url = server.url("cifar-10-binary.tar.gz");
  o.md5 = qk::data::md5_file(s.archive);
  try {
    qk::data::download_cifar10(s.dest.path(), o);
    ADD_FAILURE() << "expected an incomplete-data error";
  } catch (const qk::IoError& e) {
    EXPECT_NE(std::string(e.message()).find("data_batch_4.bin"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(entries(s.dest.path()).empty());
}

TEST(DownloadPieces, Md5OfKnownData) {
  TempDir t("md5");
  qk::atomic_write_file(t / "abc", std::string("abc"));
  EXPECT_EQ(qk::data::md5_file(t / "abc"), "900150983cd24fb0d6963f7d28e17f72");  // RFC 1321
  qk::atomic_write_file(t / "empty", std::string());
  EXPECT_EQ(qk::data::md5_file(t / "empty"), "d41d8cd98f00b204e9800998ecf8427e");
  EXPECT_THROW(qk::data::md5_file(t / "missing"), qk::IoError);
}

TEST(DownloadPieces, ArchiveCannotWriteOutsideItsFolder) {
  TempDir t("tar_evil");
  // Build hostile archives with Python's tarfile: a "../" entry, an absolute
  // path and a symlink.
  const std::string py =
      "import io, sys, tarfile\n"
      "def mk(path, name, link=None):\n"
      "    with tarfile.open(path, 'w:gz') as tf:\n"
      "        ti = tarfile.TarInfo(name)\n"
      "        if link: ti.type, ti.linkname = tarfile.SYMTYPE, link; tf.addfile(ti)\n"
      "        else: ti.size = 4; tf.addfile(ti, io.BytesIO(b'evil'))\n"
      "d = sys.argv[1]\n"
      "mk(d + '/dotdot.tgz', '../evil.txt')\n"
      "mk(d + '/abs.tgz', '/tmp/qk_evil_abs.txt')\n"
      "mk(d + '/link.tgz', 'ln', '/etc/passwd')\n";
  qk::atomic_write_file(t / "mk.py", py);
  if (std::system(("python3 '" + (t / "mk.py") + "' '" + t.path() + "'").c_str()) != 0)
    QK_MISSING_REFERENCE_TOOL("python3 (Debian: python3)");
  qk::make_dirs(t / "out");
  for (const char* a : {"dotdot.tgz", "abs.tgz", "link.tgz"})
    EXPECT_THROW(qk::data::extract_archive(t / a, t / "out"), qk::IoError) << a;
  EXPECT_FALSE(qk::file_exists(t / "evil.txt"));
  EXPECT_FALSE(qk::file_exists("/tmp/qk_evil_abs.txt"));
  EXPECT_TRUE(entries(t / "out").empty());
  qk::atomic_write_file(t / "junk.tgz", std::string("this is not an archive"));
  EXPECT_THROW(qk::data::extract_archive(t / "junk.tgz", t / "out"), qk::IoError);
}

}  // namespace
