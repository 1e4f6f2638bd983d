// A small stand-in for libFuzzer's main(), linked into the fuzz targets in the
// normal (gcc) build so that `bazel test //...` runs them: it replays the
// corpus, then feeds seeded random mutations of it to LLVMFuzzerTestOneInput
// until a time or run budget is spent. It accepts the subset of libFuzzer's
// command line that tests/fuzz/run_fuzzer.sh uses, so one script drives both:
//   driver [-max_total_time=S] [-runs=N] [-seed=N] [-dict=F] [-max_len=N]
//          [-artifact_prefix=P] DIR_OR_FILE...
// On a crash the current input is written to <artifact_prefix>crash-driver,
// and the seed and run number are printed, so the run can be replayed.
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
extern "C" void __sanitizer_set_death_callback(void (*)(void)) __attribute__((weak));

namespace {

using Bytes = std::string;

// The input being run, for the crash handler (which may only use
// async-signal-safe calls, hence the fixed path buffer).
const Bytes* g_current = nullptr;
char g_crash_path[4096] = "crash-driver";

void WriteCurrentInput() {
  if (g_current == nullptr) return;
  const int fd = open(g_crash_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return;
  size_t done = 0;
  while (done < g_current->size()) {
    const ssize_t n = write(fd, g_current->data() + done, g_current->size() - done);
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  close(fd);
  static const char kMsg[] = "fuzz_driver: crashing input written to the artifact path\n";
  (void)!write(2, kMsg, sizeof(kMsg) - 1);
}

void OnSignal(int sig) {
  WriteCurrentInput();
  signal(sig, SIG_DFL);
  raise(sig);
}

bool ReadWhole(const std::string& path, Bytes* out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::ostringstream s;
  s << in.rdbuf();
  *out = s.str();
  return true;
}

// Regular files of `path` (a directory, read in name order, or one file).
void LoadCorpus(const std::string& path, std::vector<Bytes>* corpus) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) return;
  if (!S_ISDIR(st.st_mode)) {
    Bytes b;
    if (ReadWhole(path, &b)) corpus->push_back(std::move(b));
    return;
  }
  std::vector<std::string> names;
  if (DIR* dir = opendir(path.c_str())) {
    while (const dirent* e = readdir(dir)) {
      if (e->d_name[0] != '.') names.push_back(e->d_name);
    }
    closedir(dir);
  }
  std::sort(names.begin(), names.end());
  for (const std::string& n : names) LoadCorpus(path + "/" + n, corpus);
}

// libFuzzer dictionary lines: name="value" or "value", with \\, \" and \xNN.
std::vector<Bytes> LoadDictionary(const std::string& path) {
  std::vector<Bytes> tokens;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    const size_t open = line.find('"');
    const size_t close = line.rfind('"');
    if (line.empty() || line[0] == '#' || open == std::string::npos || close <= open) continue;
    Bytes t;
    for (size_t i = open + 1; i < close; ++i) {
      if (line[i] == '\\' && i + 1 < close) {
        if (line[i + 1] == 'x' && i + 3 < close) {
          t.push_back(static_cast<char>(std::strtol(line.substr(i + 2, 2).c_str(), nullptr, 16)));
          i += 3;
        } else {
          t.push_back(line[++i]);
        }
      } else {
        t.push_back(line[i]);
      }
    }
    tokens.push_back(t);
  }
  return tokens;
}

class Mutator {
 public:
  Mutator(uint64_t seed, const std::vector<Bytes>* corpus, std::vector<Bytes> dict, size_t max_len)
      : rng_(seed), corpus_(corpus), dict_(std::move(dict)), max_len_(max_len) {}

  // One to four random edits of a random corpus entry.
  Bytes Next() {
    Bytes b = corpus_->empty() ? Bytes() : (*corpus_)[Below(corpus_->size())];
    const int edits = 1 + static_cast<int>(Below(4));
    for (int e = 0; e < edits; ++e) Edit(&b);
    if (b.size() > max_len_) b.resize(max_len_);
    return b;
  }

 private:
  size_t Below(size_t n) { return n == 0 ? 0 : static_cast<size_t>(rng_() % n); }

  char Interesting() {
    static const char kBytes[] = {0,    1,   '\x7f', '\x80', '\xff', '0', '9', '-',  ' ',
                                  '\n', ':', '{',    '}',    '(',    ')', ',', '\'', '"'};
    return kBytes[Below(sizeof(kBytes))];
  }

  void Edit(Bytes* b) {
    const size_t n = b->size();
    switch (Below(8)) {
      case 0:  // flip one bit
        if (n > 0) (*b)[Below(n)] ^= static_cast<char>(1u << Below(8));
        break;
      case 1:  // overwrite a byte
        if (n > 0) (*b)[Below(n)] = Below(2) ? Interesting() : static_cast<char>(rng_());
        break;
      case 2: {  // insert a few bytes
        Bytes ins(1 + Below(8), '\0');
        for (char& c : ins) c = Below(2) ? Interesting() : static_cast<char>(rng_());
        b->insert(Below(n + 1), ins);
        break;
      }
      case 3:  // erase a range
        if (n > 0) {
          const size_t at = Below(n);
          b->erase(at, 1 + Below(std::min<size_t>(n - at, 16)));
        }
        break;
      case 4:  // copy a range of itself elsewhere
        if (n > 0) {
          const size_t from = Below(n), len = 1 + Below(std::min<size_t>(n - from, 32));
          b->insert(Below(n + 1), b->substr(from, len));
        }
        break;
      case 5:  // splice with another input
        if (!corpus_->empty()) {
          const Bytes& other = (*corpus_)[Below(corpus_->size())];
          const size_t cut = Below(n + 1), from = Below(other.size() + 1);
          *b = b->substr(0, cut) + other.substr(from);
        }
        break;
      default:  // insert or overwrite with a dictionary token
        if (!dict_.empty()) {
          const Bytes& t = dict_[Below(dict_.size())];
          const size_t at = Below(n + 1);
          if (Below(2) && at + t.size() <= n) {
            b->replace(at, t.size(), t);
          } else {
            b->insert(at, t);
          }
        }
        break;
    }
  }

  std::mt19937_64 rng_;
  const std::vector<Bytes>* corpus_;
  std::vector<Bytes> dict_;
  size_t max_len_;
};

void Run(const Bytes& b) {
  g_current = &b;
  LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(b.data()), b.size());
  g_current = nullptr;
}

bool Flag(const char* arg, const char* name, std::string* value) {
  const size_t len = std::strlen(name);
  if (std::strncmp(arg, name, len) != 0 || arg[len] != '=') return false;
  *value = arg + len + 1;
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  double max_seconds = 0;
  long long max_runs = -1;
  uint64_t seed = 1;
  size_t max_len = 4096;
  std::string dict_path, value;
  std::vector<std::string> inputs;
  for (int i = 1; i < argc; ++i) {
    if (Flag(argv[i], "-max_total_time", &value)) {
      max_seconds = std::atof(value.c_str());
    } else if (Flag(argv[i], "-runs", &value)) {
      max_runs = std::atoll(value.c_str());
    } else if (Flag(argv[i], "-seed", &value)) {
      seed = std::strtoull(value.c_str(), nullptr, 10);
    } else if (Flag(argv[i], "-dict", &value)) {
      dict_path = value;
    } else if (Flag(argv[i], "-max_len", &value)) {
      max_len = static_cast<size_t>(std::atoll(value.c_str()));
    } else if (Flag(argv[i], "-artifact_prefix", &value)) {
      std::snprintf(g_crash_path, sizeof(g_crash_path), "%scrash-driver", value.c_str());
    } else if (argv[i][0] == '-') {
      std::fprintf(stderr, "fuzz_driver: ignoring libFuzzer flag %s\n", argv[i]);
    } else {
      inputs.push_back(argv[i]);
    }
  }
  for (int sig : {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT}) signal(sig, OnSignal);
  if (__sanitizer_set_death_callback != nullptr) __sanitizer_set_death_callback(WriteCurrentInput);

  std::vector<Bytes> corpus;
  for (const std::string& in : inputs) LoadCorpus(in, &corpus);
  const auto start = std::chrono::steady_clock::now();
  for (const Bytes& b : corpus) Run(b);
  std::fprintf(stderr, "fuzz_driver: replayed %zu corpus inputs; mutating with -seed=%llu\n",
               corpus.size(), static_cast<unsigned long long>(seed));

  Mutator mutator(seed, &corpus,
                  dict_path.empty() ? std::vector<Bytes>() : LoadDictionary(dict_path), max_len);
  long long runs = 0;
  auto elapsed = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  while ((max_runs < 0 || runs < max_runs) && (max_runs >= 0 || elapsed() < max_seconds)) {
    const Bytes b = mutator.Next();
    ++runs;
    Run(b);
  }
  std::fprintf(stderr, "fuzz_driver: %lld mutated inputs in %.1f s (%.0f/s), no crash\n", runs,
               elapsed(), runs / std::max(elapsed(), 1e-9));
  return 0;
}
