// `qk preprocess` pipeline: read -> tokenize (workers) -> write, in order.
//
// JSON lines: the calling thread reads ~1 MiB batches of whole lines and
// hands each to the worker pool; a batch's result (tokens, sentence lengths,
// per-document sentence counts) is written by the calling thread strictly in
// batch order, so the dataset does not depend on the worker count. At most
// 2 * workers + 2 batches exist at once, which bounds memory.
// A folder of .txt files: each file is its own dataset, so each worker
// streams a whole file through its own builder; no ordering is needed.
#include "qk/data/preprocess.h"

#include <fmt/format.h>

#include <cstdio>
#include <deque>
#include <filesystem>
#include <future>
#include <memory>
#include <nlohmann/json.hpp>

#include "tokenizer/unicode.h"
#include "qk/base/error.h"
#include "qk/base/log.h"
#include "qk/base/thread_pool.h"
#include "qk/base/timer.h"
#include "qk/data/indexed_dataset.h"

namespace qk::data {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

// Reads whole lines in batches of about `target` bytes.
class LineBatchReader {
 public:
  LineBatchReader(const std::string& path, size_t target) : path_(path), target_(target) {
    f_ = std::fopen(path.c_str(), "rb");
    QK_CHECK_AS(IoError, f_ != nullptr, "cannot open input '", path, "': ",
                qk::detail::errno_string(errno));
  }
  ~LineBatchReader() { std::fclose(f_); }
  LineBatchReader(const LineBatchReader&) = delete;
  LineBatchReader& operator=(const LineBatchReader&) = delete;

  // Fills `text` with complete lines and `first_line` with the 1-based number
  // of its first line; false at the end of the input.
  bool next(std::string& text, int64_t& first_line) {
    text.swap(carry_);
    carry_.clear();
    while (!eof_) {
      const size_t at = text.size();
      text.resize(at + target_);
      const size_t n = std::fread(text.data() + at, 1, target_, f_);
      text.resize(at + n);
      if (n < target_) {
        QK_CHECK_AS(IoError, !std::ferror(f_), "read error on '", path_, "'");
        eof_ = true;
      }
      const size_t nl = text.rfind('\n');
      if (nl != std::string::npos && nl >= text.size() / 2) {
        carry_.assign(text, nl + 1);
        text.resize(nl + 1);
        break;
      }
    }
    if (text.empty()) return false;
    first_line = next_line_;
    for (char c : text) next_line_ += c == '\n';
    if (eof_ && text.back() != '\n') ++next_line_;
    return true;
  }

 private:
  std::string path_;
  size_t target_;
  FILE* f_ = nullptr;
  bool eof_ = false;
  std::string carry_;
  int64_t next_line_ = 1;
};

// What a worker returns for one batch: per key, the tokens of every
// document back to back, each sentence's length and each document's
// sentence count.
struct KeyOutput {
  std::vector<int32_t> tokens;
  std::vector<int32_t> lengths;
  std::vector<int32_t> sentences_per_doc;
};
struct BatchResult {
  std::vector<KeyOutput> keys;
  int64_t documents = 0, bytes = 0, skipped = 0;
  std::vector<std::string> warnings;
};

// Megatron's Encoder.encode for one field: each sentence tokenized, empty
// ones dropped, EOD appended to the last sentence.
void encode_field(const json& v, const Tokenizer& tok, bool append_eod, KeyOutput& k,
                  std::vector<int32_t>& scratch) {
  int32_t sentences = 0;
  auto add = [&](const std::string& s) {
    scratch.clear();
    tok.encode(s, scratch);
    if (scratch.empty()) return;
    k.tokens.insert(k.tokens.end(), scratch.begin(), scratch.end());
    k.lengths.push_back(static_cast<int32_t>(scratch.size()));
    ++sentences;
  };
  if (v.is_string()) {
    add(v.get_ref<const std::string&>());
  } else {
    for (const auto& s : v) add(s.get_ref<const std::string&>());
  }
  if (append_eod && sentences > 0) {
    k.tokens.push_back(tok.eod());
    ++k.lengths.back();
  }
  k.sentences_per_doc.push_back(sentences);
}

BatchResult encode_batch(const std::string& text, int64_t first_line, const PreprocessOptions& o,
                         const Tokenizer& tok) {
  BatchResult r;
  r.keys.resize(o.json_keys.size());
  r.bytes = static_cast<int64_t>(text.size());
  std::vector<int32_t> scratch;
  int64_t line_no = first_line;
  for (size_t pos = 0; pos < text.size(); ++line_no) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string::npos) nl = text.size();
    std::string_view line(text.data() + pos, nl - pos);
    pos = nl + 1;
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;  // blank line
    std::string problem;
    json doc;
    try {
      doc = json::parse(line);
    } catch (const json::parse_error& e) {
      problem = fmt::format("malformed JSON ({})", e.what());
    }
    if (problem.empty() && !doc.is_object()) problem = "expected a JSON object";
    for (size_t k = 0; problem.empty() && k < o.json_keys.size(); ++k) {
      auto it = doc.find(o.json_keys[k]);
      if (it == doc.end()) {
        problem = fmt::format("missing key '{}' (use --json-keys to choose the field)", o.json_keys[k]);
      } else if (!it->is_string() &&
                 !(it->is_array() && std::all_of(it->begin(), it->end(), [](const json& s) { return s.is_string(); }))) {
        problem = fmt::format("key '{}' is not a string or a list of strings", o.json_keys[k]);
      }
    }
    if (!problem.empty()) {
      const std::string msg = fmt::format("{}:{}: {}", o.input, line_no, problem);
      QK_CHECK(o.skip_invalid, msg, "; fix the line or pass --skip-invalid to skip such lines");
      r.warnings.push_back(msg);
      ++r.skipped;
      continue;
    }
    for (size_t k = 0; k < o.json_keys.size(); ++k)
      encode_field(doc[o.json_keys[k]], tok, o.append_eod, r.keys[k], scratch);
    ++r.documents;
  }
  return r;
}

std::string dataset_prefix(const PreprocessOptions& o, const std::string& name) {
  return fs::absolute(o.output_prefix + "_" + name + "_document").lexically_normal().string();
}

void make_parent_dirs(const std::string& prefix) {
  const auto parent = fs::path(prefix).parent_path();
  if (!parent.empty()) make_dirs(parent.string());
}

// Rate-limited progress reporting.
class Progress {
 public:
  explicit Progress(const ProgressFn& fn) : fn_(fn) {}
  void add(int64_t docs, int64_t bytes, bool force = false) {
    p_.documents += docs;
    p_.bytes += bytes;
    if (!fn_) return;
    const double t = timer_.seconds();
    if (force || t - last_ >= 0.5) {
      p_.seconds = t;
      p_.done = force;
      fn_(p_);
      last_ = t;
    }
  }
  double seconds() const { return timer_.seconds(); }
  const PreprocessProgress& totals() const { return p_; }

 private:
  const ProgressFn& fn_;
  Timer timer_;
  double last_ = 0;
  PreprocessProgress p_;
};

PreprocessResult preprocess_jsonl(const PreprocessOptions& o, const Tokenizer& tok,
                                  const ProgressFn& progress_fn) {
  QK_CHECK(!o.json_keys.empty(), "--json-keys needs at least one key");
  const DType dtype = optimal_dtype(tok.vocab_size());
  PreprocessResult res;
  std::vector<std::unique_ptr<IndexedDatasetBuilder>> builders;
  for (const auto& key : o.json_keys) {
    const std::string prefix = dataset_prefix(o, key);
    make_parent_dirs(prefix);
    builders.push_back(std::make_unique<IndexedDatasetBuilder>(bin_path(prefix), dtype));
    res.outputs.push_back({prefix, 0, 0});
  }
  if (o.append_eod)
    QK_CHECK(tok.eod() >= 0, "--append-eod: the tokenizer has no end-of-document token");

  Progress progress(progress_fn);
  int warned = 0;
  auto write = [&](BatchResult r) {
    for (const auto& w : r.warnings)
      if (warned++ < 10) QK_WARN("skipping {}", w);
    for (size_t k = 0; k < builders.size(); ++k) {
      const KeyOutput& ko = r.keys[k];
      size_t tok_at = 0, len_at = 0;
      for (int32_t ns : ko.sentences_per_doc) {
        size_t n = 0;
        for (int32_t s = 0; s < ns; ++s) n += static_cast<size_t>(ko.lengths[len_at + s]);
        builders[k]->add_document(std::span<const int32_t>(ko.tokens.data() + tok_at, n),
                                  std::span<const int32_t>(ko.lengths.data() + len_at, ns));
        tok_at += n;
        len_at += static_cast<size_t>(ns);
      }
    }
    res.documents += r.documents;
    res.bytes += r.bytes;
    res.skipped += r.skipped;
    progress.add(r.documents, r.bytes);
  };

  LineBatchReader reader(o.input, o.batch_bytes);
  const int workers = std::max(1, o.workers);
  std::deque<std::future<BatchResult>> inflight;
  {
    TaskPool pool(workers);
    try {
      std::string text;
      int64_t first_line = 0;
      while (reader.next(text, first_line)) {
        auto task = std::make_shared<std::packaged_task<BatchResult()>>(
            [t = std::move(text), first_line, &o, &tok] { return encode_batch(t, first_line, o, tok); });
        text = std::string();
        inflight.push_back(task->get_future());
        pool.submit([task] { (*task)(); });
        while (inflight.size() >= static_cast<size_t>(2 * workers + 1)) {
          write(inflight.front().get());
          inflight.pop_front();
        }
      }
      while (!inflight.empty()) {
        write(inflight.front().get());
        inflight.pop_front();
      }
    } catch (...) {
      // Let queued batches finish (the pool's destructor waits) and drop them.
      inflight.clear();
      throw;
    }
  }
  if (res.skipped > 10) QK_WARN("skipped {} invalid lines in all ({} not shown)", res.skipped, res.skipped - 10);
  for (size_t k = 0; k < builders.size(); ++k) {
    res.outputs[k].tokens = builders[k]->num_tokens();
    res.outputs[k].documents = builders[k]->num_documents();
    builders[k]->finalize(idx_path(res.outputs[k].prefix));
  }
  progress.add(0, 0, /*force=*/true);
  res.seconds = progress.seconds();
  return res;
}

// One .txt file -> one dataset with one document; each line a sentence.
PreprocessOutput encode_text_file(const std::string& path, const std::string& prefix,
                                  const PreprocessOptions& o, const Tokenizer& tok, int64_t* skipped) {
  IndexedDatasetBuilder b(bin_path(prefix), optimal_dtype(tok.vocab_size()));
  LineBatchReader reader(path, o.batch_bytes);
  std::string text;
  int64_t line_no = 0;
  std::vector<int32_t> ids;
  std::vector<int32_t> pending;  // the last non-empty sentence, held back for the EOD
  bool have_pending = false;
  while (reader.next(text, line_no)) {
    for (size_t pos = 0; pos < text.size(); ++line_no) {
      size_t nl = text.find('\n', pos);
      const size_t end = nl == std::string::npos ? text.size() : nl + 1;
      std::string_view line(text.data() + pos, end - pos);  // keeps its newline, as readlines()
      pos = end;
      size_t bad = 0;
      if (!unicode::valid_utf8(line, &bad)) {
        const std::string msg = fmt::format("{}:{}: invalid UTF-8 at byte {} of the line", path, line_no, bad);
        QK_CHECK(o.skip_invalid, msg, "; convert the file to UTF-8 or pass --skip-invalid");
        QK_WARN("skipping {}", msg);
        ++*skipped;
        continue;
      }
      ids.clear();
      tok.encode(line, ids);
      if (ids.empty()) continue;
      if (have_pending) b.add_item(std::span<const int32_t>(pending));
      pending.swap(ids);
      have_pending = true;
    }
  }
  if (have_pending) {
    if (o.append_eod) pending.push_back(tok.eod());
    b.add_item(std::span<const int32_t>(pending));
  }
  b.end_document();
  PreprocessOutput out{prefix, b.num_tokens(), 1};
  b.finalize(idx_path(prefix));
  return out;
}

PreprocessResult preprocess_folder(const PreprocessOptions& o, const Tokenizer& tok,
                                   const ProgressFn& progress_fn) {
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(o.input))
    if (e.is_regular_file() && e.path().extension() == ".txt") files.push_back(e.path());
  std::sort(files.begin(), files.end());
  QK_CHECK(!files.empty(), "input folder '", o.input, "' has no .txt files");
  if (o.append_eod)
    QK_CHECK(tok.eod() >= 0, "--append-eod: the tokenizer has no end-of-document token");
  PreprocessResult res;
  res.outputs.resize(files.size());
  std::vector<int64_t> skipped(files.size(), 0);
  for (size_t i = 0; i < files.size(); ++i) {
    res.outputs[i].prefix = dataset_prefix(o, files[i].filename().string());
    make_parent_dirs(res.outputs[i].prefix);
  }
  Progress progress(progress_fn);
  std::mutex mu;
  std::vector<std::future<void>> done;
  {
    TaskPool pool(std::max(1, o.workers));
    for (size_t i = 0; i < files.size(); ++i) {
      auto task = std::make_shared<std::packaged_task<void()>>([&, i] {
        res.outputs[i] = encode_text_file(files[i].string(), res.outputs[i].prefix, o, tok, &skipped[i]);
        std::lock_guard<std::mutex> lock(mu);
        progress.add(1, static_cast<int64_t>(fs::file_size(files[i])));
      });
      done.push_back(task->get_future());
      pool.submit([task] { (*task)(); });
    }
    pool.wait_idle();
  }
  for (auto& f : done) f.get();  // rethrows the first failure
  for (size_t i = 0; i < files.size(); ++i) res.skipped += skipped[i];
  res.documents = progress.totals().documents;
  res.bytes = progress.totals().bytes;
  progress.add(0, 0, /*force=*/true);
  res.seconds = progress.seconds();
  return res;
}

}  // namespace

PreprocessResult preprocess(const PreprocessOptions& o, const Tokenizer& tok,
                            const ProgressFn& progress) {
  QK_CHECK(!o.input.empty(), "--input is required");
  QK_CHECK(!o.output_prefix.empty(), "--output-prefix is required");
  QK_CHECK(o.workers >= 1 && o.workers <= 1024, "--workers must be in 1..1024, got ", o.workers);
  QK_CHECK_AS(IoError, fs::exists(o.input), "input '", o.input, "' not found");
  if (fs::is_directory(o.input)) return preprocess_folder(o, tok, progress);
  return preprocess_jsonl(o, tok, progress);
}

}  // namespace qk::data
