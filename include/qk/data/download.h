// Fetching the CIFAR-10 binary release: HTTP(S) download (libcurl), MD5 check
// (OpenSSL), tar.gz extraction (libarchive), published atomically.
//
//   std::string dir = qk::data::download_cifar10("data");  // data/cifar-10-batches-bin
//
//   qk::data::DownloadOptions o;
//   o.url = "http://127.0.0.1:8000/cifar-10-binary.tar.gz";  // a mirror
//   o.md5 = "...";                                           // its checksum
//   qk::data::download_cifar10("data", o);
//
// Nothing half-done is ever visible: the archive is fetched and unpacked in
// <data_dir>/.cifar10-download.<pid>/, checked (MD5, then every file of the
// release validated as load_cifar10 does), and only then renamed to
// <data_dir>/cifar-10-batches-bin. Any failure removes the temporary folder.
// When the release is already present and valid, nothing is fetched.
#pragma once

#include <string>

namespace qk::data {

inline constexpr const char* kCifar10Url = "https://www.cs.toronto.edu/~kriz/cifar-10-binary.tar.gz";
inline constexpr const char* kCifar10Md5 = "c32a1d4ab5d03f1284b67883e8d87530";

struct DownloadOptions {
  // Empty: $QK_CIFAR10_URL, else kCifar10Url.
  std::string url;
  // Expected MD5 (hex) of the archive. Empty: $QK_CIFAR10_MD5, else kCifar10Md5.
  std::string md5;
  // Give up when fewer than 1 KiB/s arrive for this long, or connecting takes longer.
  int stall_timeout_s = 60;
  // Log progress (every 10%) at INFO.
  bool progress = true;
};

// Downloads, verifies and unpacks the release into data_dir (created if
// needed); returns the cifar-10-batches-bin folder. Throws IoError on a
// network failure, an HTTP error, a checksum mismatch or a bad archive.
std::string download_cifar10(const std::string& data_dir, const DownloadOptions& opts = {});

// ---- the pieces, for tests and other data sets ----

// Fetches url (http or https only) into path; throws IoError on failure.
void http_download(const std::string& url, const std::string& path, int stall_timeout_s = 60,
                   bool progress = false);
// The MD5 of a file, as 32 lower-case hex digits.
std::string md5_file(const std::string& path);
// Unpacks a .tar.gz (or any format libarchive reads) into dest_dir. Only
// regular files and folders are written; absolute paths, ".." and links are
// refused (IoError), so an archive cannot write outside dest_dir.
void extract_archive(const std::string& archive, const std::string& dest_dir);

}  // namespace qk::data
