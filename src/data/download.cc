// Fetch, verify and unpack the CIFAR-10 release (see qk/data/download.h).
#include "qk/data/download.h"

#include <archive.h>
#include <archive_entry.h>
#include <curl/curl.h>
#include <openssl/evp.h>
#include <unistd.h>

#include <cctype>
#include <cstdio>
#include <filesystem>
#include <memory>

#include "qk/base/env.h"
#include "qk/base/error.h"
#include "qk/base/file_io.h"
#include "qk/base/log.h"
#include "qk/base/timer.h"
#include "qk/data/cifar10.h"

namespace qk::data {
namespace {

namespace fs = std::filesystem;

QK_ENV_STRING(env_cifar_url, "QK_CIFAR10_URL", "",
              "Where --download fetches cifar-10-binary.tar.gz from (default: the official "
              "https://www.cs.toronto.edu/~kriz/ URL); for a mirror or a local copy.");
QK_ENV_STRING(env_cifar_md5, "QK_CIFAR10_MD5", "",
              "The MD5 the downloaded CIFAR-10 archive must have (default: the official "
              "c32a1d4ab5d03f1284b67883e8d87530); set it with QK_CIFAR10_URL for a repacked mirror.");

struct FileCloser {
  void operator()(FILE* f) const { std::fclose(f); }
};

struct Transfer {
  FILE* out;
  std::string url;
  bool progress;
  int last_decile = -1;
};

size_t write_cb(char* data, size_t size, size_t n, void* user) {
  auto* t = static_cast<Transfer*>(user);
  return std::fwrite(data, size, n, t->out) * size;  // a short count makes curl fail the transfer
}

int progress_cb(void* user, curl_off_t total, curl_off_t now, curl_off_t, curl_off_t) {
  auto* t = static_cast<Transfer*>(user);
  if (t->progress && total > 0) {
    const int decile = static_cast<int>(now * 10 / total);
    if (decile > t->last_decile) {
      t->last_decile = decile;
      QK_INFO("download: {}% of {} ({})", decile * 10, format_bytes(static_cast<uint64_t>(total)), t->url);
    }
  }
  return 0;
}

// Removes a folder tree when it goes out of scope, unless released.
class ScopedDir {
 public:
  explicit ScopedDir(std::string p) : path_(std::move(p)) {}
  ~ScopedDir() {
    std::error_code ec;
    if (!path_.empty()) fs::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

bool is_hex_md5(const std::string& s) {
  if (s.size() != 32) return false;
  for (char c : s)
    if (!std::isxdigit(static_cast<unsigned char>(c))) return false;
  return true;
}

std::string lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace

void http_download(const std::string& url, const std::string& path, int stall_timeout_s, bool progress) {
  QK_CHECK(url.starts_with("http://") || url.starts_with("https://"), "download: expected an http:// or https:// URL, got '",
           url, "'");
  static const CURLcode init = curl_global_init(CURL_GLOBAL_DEFAULT);
  QK_CHECK_AS(IoError, init == CURLE_OK, "download: libcurl failed to initialise: ", curl_easy_strerror(init));
  std::unique_ptr<FILE, FileCloser> out(std::fopen(path.c_str(), "wb"));
  QK_CHECK_AS(IoError, out != nullptr, "download: cannot create ", path, ": ", detail::errno_string(errno));
  std::unique_ptr<CURL, decltype(&curl_easy_cleanup)> curl(curl_easy_init(), &curl_easy_cleanup);
  QK_CHECK_AS(IoError, curl != nullptr, "download: curl_easy_init failed");
  Transfer t{out.get(), url, progress};
  char errbuf[CURL_ERROR_SIZE] = {0};
  CURL* c = curl.get();
  curl_easy_setopt(c, CURLOPT_URL, url.c_str());
#if LIBCURL_VERSION_NUM >= 0x075500
  curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(c, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
#endif
  curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 1L);
  curl_easy_setopt(c, CURLOPT_MAXREDIRS, 10L);
  curl_easy_setopt(c, CURLOPT_FAILONERROR, 1L);  // HTTP >= 400 is an error, not a body to save
  curl_easy_setopt(c, CURLOPT_ERRORBUFFER, errbuf);
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, &write_cb);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &t);
  curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
  curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, &progress_cb);
  curl_easy_setopt(c, CURLOPT_XFERINFODATA, &t);
  curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, static_cast<long>(stall_timeout_s));
  // A stalled transfer fails instead of hanging: < 1 KiB/s for stall_timeout_s.
  curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1024L);
  curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, static_cast<long>(stall_timeout_s));
  curl_easy_setopt(c, CURLOPT_USERAGENT, "qianka/" "cifar10-download");
  const CURLcode rc = curl_easy_perform(c);
  long status = 0;
  curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
  const bool flushed = std::fflush(out.get()) == 0;
  if (rc != CURLE_OK) {
    std::error_code ec;
    out.reset();
    fs::remove(path, ec);
    QK_THROW(IoError, "download of ", url, " failed: ", errbuf[0] ? errbuf : curl_easy_strerror(rc),
             status > 0 ? " (HTTP " + std::to_string(status) + ")" : std::string(),
             ". Check the URL and the network (a proxy is taken from $https_proxy), or fetch the file by hand "
             "and unpack it into the data folder.");
  }
  QK_CHECK_AS(IoError, flushed, "download: writing ", path, " failed: ", detail::errno_string(errno));
}

std::string md5_file(const std::string& path) {
  std::unique_ptr<FILE, FileCloser> f(std::fopen(path.c_str(), "rb"));
  QK_CHECK_AS(IoError, f != nullptr, "md5: cannot open ", path, ": ", detail::errno_string(errno));
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx(EVP_MD_CTX_new(), &EVP_MD_CTX_free);
  QK_CHECK_AS(IoError, ctx && EVP_DigestInit_ex(ctx.get(), EVP_md5(), nullptr) == 1,
              "md5: OpenSSL has no MD5 digest available");
  std::vector<char> buf(1 << 20);
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), f.get())) > 0) EVP_DigestUpdate(ctx.get(), buf.data(), n);
  QK_CHECK_AS(IoError, !std::ferror(f.get()), "md5: reading ", path, " failed");
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_DigestFinal_ex(ctx.get(), md, &len);
  static const char* hex = "0123456789abcdef";
  std::string s;
  for (unsigned i = 0; i < len; ++i) {
    s += hex[md[i] >> 4];
    s += hex[md[i] & 15];
  }
  return s;
}

void extract_archive(const std::string& archive_path, const std::string& dest_dir) {
  std::unique_ptr<archive, decltype(&archive_read_free)> a(archive_read_new(), &archive_read_free);
  archive_read_support_filter_all(a.get());
  archive_read_support_format_all(a.get());
  QK_CHECK_AS(IoError, archive_read_open_filename(a.get(), archive_path.c_str(), 1 << 16) == ARCHIVE_OK,
              "cannot open archive ", archive_path, ": ", archive_error_string(a.get()));
  std::unique_ptr<archive, decltype(&archive_write_free)> w(archive_write_disk_new(), &archive_write_free);
  // Entry names are checked below and then made absolute under dest_dir, so
  // libarchive's NOABSOLUTEPATHS cannot be used; its ".." and symlink checks can.
  archive_write_disk_set_options(w.get(), ARCHIVE_EXTRACT_SECURE_NODOTDOT | ARCHIVE_EXTRACT_SECURE_SYMLINKS);
  archive_entry* e = nullptr;
  int files = 0;
  for (;;) {
    const int r = archive_read_next_header(a.get(), &e);
    if (r == ARCHIVE_EOF) break;
    QK_CHECK_AS(IoError, r == ARCHIVE_OK || r == ARCHIVE_WARN, "archive ", archive_path,
                " is damaged: ", archive_error_string(a.get()));
    const std::string name = archive_entry_pathname(e) ? archive_entry_pathname(e) : "";
    const auto type = archive_entry_filetype(e);
    QK_CHECK_AS(IoError, type == AE_IFREG || type == AE_IFDIR, "archive ", archive_path, ": entry '", name,
                "' is not a regular file or folder (links and devices are refused)");
    bool escapes = name.empty() || name[0] == '/';
    for (const auto& part : fs::path(name)) escapes |= part == "..";
    QK_CHECK_AS(IoError, !escapes, "archive ", archive_path, ": entry '", name,
                "' points outside the destination folder; refused");
    const std::string out = (fs::path(dest_dir) / name).string();
    archive_entry_set_pathname(e, out.c_str());
    QK_CHECK_AS(IoError, archive_write_header(w.get(), e) == ARCHIVE_OK, "unpacking ", name, " from ",
                archive_path, " failed: ", archive_error_string(w.get()));
    const void* buf;
    size_t size;
    la_int64_t offset;
    for (;;) {
      const int rb = archive_read_data_block(a.get(), &buf, &size, &offset);
      if (rb == ARCHIVE_EOF) break;
      QK_CHECK_AS(IoError, rb == ARCHIVE_OK, "archive ", archive_path, " is damaged at '", name,
                  "': ", archive_error_string(a.get()));
      QK_CHECK_AS(IoError, archive_write_data_block(w.get(), buf, size, offset) == ARCHIVE_OK, "writing ",
                  out, " failed: ", archive_error_string(w.get()));
    }
    QK_CHECK_AS(IoError, archive_write_finish_entry(w.get()) == ARCHIVE_OK, "writing ", out,
                " failed: ", archive_error_string(w.get()));
    ++files;
  }
  QK_CHECK_AS(IoError, files > 0, "archive ", archive_path, " holds no files");
}

std::string download_cifar10(const std::string& data_dir, const DownloadOptions& opts) {
  const std::string final_dir = (fs::path(data_dir) / kCifarBatchesDirName).string();
  if (cifar10_present(data_dir)) {
    load_cifar10(data_dir);  // validates; a broken copy throws naming the file
    QK_INFO("CIFAR-10 already present in {}; not downloading", cifar10_batches_dir(data_dir));
    return cifar10_batches_dir(data_dir);
  }
  std::error_code ec;
  QK_CHECK_AS(IoError, !fs::exists(final_dir, ec), "CIFAR-10 download: ", final_dir,
              " exists but is incomplete; delete it and run the download again");
  const std::string url = !opts.url.empty() ? opts.url : !env_cifar_url.reload().empty() ? env_cifar_url.reload() : kCifar10Url;
  const std::string md5 = lower(!opts.md5.empty() ? opts.md5 : !env_cifar_md5.reload().empty() ? env_cifar_md5.reload() : kCifar10Md5);
  QK_CHECK(is_hex_md5(md5), "CIFAR-10 download: the expected MD5 must be 32 hex digits, got '", md5, "'");

  make_dirs(data_dir);
  const ScopedDir tmp((fs::path(data_dir) / (".cifar10-download." + std::to_string(::getpid()))).string());
  fs::remove_all(tmp.path(), ec);
  make_dirs(tmp.path());
  const std::string archive_path = tmp.path() + "/cifar-10-binary.tar.gz";
  Timer timer;
  QK_INFO("downloading CIFAR-10 from {}", url);
  http_download(url, archive_path, opts.stall_timeout_s, opts.progress);
  const auto bytes = fs::file_size(archive_path, ec);
  const std::string got = md5_file(archive_path);
  QK_CHECK_AS(IoError, got == md5, "CIFAR-10 download from ", url, ": checksum mismatch: MD5 ", got, ", expected ",
              md5, " (", bytes, " bytes received). The file is damaged or not the CIFAR-10 binary release; nothing "
              "was unpacked. Retry, or point QK_CIFAR10_URL at a good copy.");
  const std::string unpack = tmp.path() + "/unpacked";
  make_dirs(unpack);
  extract_archive(archive_path, unpack);
  const std::string got_dir = unpack + "/" + kCifarBatchesDirName;
  QK_CHECK_AS(IoError, fs::is_directory(got_dir, ec), "CIFAR-10 archive from ", url, " has no ", kCifarBatchesDirName,
              "/ folder: it is not the binary release (the python release unpacks to cifar-10-batches-py/)");
  load_cifar10(got_dir);  // every file validated before anything is published
  fs::rename(got_dir, final_dir, ec);
  QK_CHECK_AS(IoError, !ec, "CIFAR-10 download: moving ", got_dir, " to ", final_dir, " failed: ", ec.message());
  QK_INFO("CIFAR-10: {} downloaded and verified (MD5 {}) into {} in {}", format_bytes(static_cast<uint64_t>(bytes)),
          got, final_dir, format_duration(timer.seconds()));
  return final_dir;
}

}  // namespace qk::data
