// llama2.c checkpoints (github.com/karpathy/llama2.c, MIT):
//
// legacy (run.c `read_checkpoint` / export.py `legacy_export`): 7 int32
//   dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len
//   (vocab_size < 0: the classifier is not shared and follows at the end), then fp32 tensors
//   token_embedding [vocab,dim]; rms_att [L,dim]; wq [L,dim,dim]; wk [L,kv_dim,dim];
//   wv [L,kv_dim,dim]; wo [L,dim,dim]; rms_ffn [L,dim]; w1 [L,hidden,dim]; w2 [L,dim,hidden];
//   w3 [L,hidden,dim]; rms_final [dim]; freq_cis_real and _imag [seq_len, head_size/2] each
//   (unused: RoPE is recomputed); wcls [vocab,dim] when not shared.
// version 1 (export.py `version1_export`): uint32 magic 0x616b3432 ("ak42"), int32 version = 1,
//   the 7 int32 above (vocab_size positive), uint8 shared_classifier, zero padding to 256
//   bytes, then fp32: attention_norm ×L, ffn_norm ×L, norm, tok_embeddings, wq ×L, wk ×L,
//   wv ×L, wo ×L, w1 ×L, w2 ×L, w3 ×L, and output when not shared.
//   (version 2 is the Q8_0 int8 export, refused with a clear message.)
#include <fmt/format.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>

#include <unistd.h>

#include <cerrno>

#include "qconform/error.hpp"
#include "core/fileio.hpp"
#include "model/model.hpp"
#include "core/sha256.hpp"

namespace qc {

namespace {

constexpr uint32_t kMagicV1 = 0x616b3432;  // "ak42" as a little-endian uint32
constexpr size_t kHeaderV1 = 256;

std::vector<uint8_t> read_file_bytes(const std::string& path, const char* what) {
  // `open_input` refuses FIFOs, devices and directories without blocking; one read pass.
  uint64_t size = 0;
  const int fd = open_input(path, &size);
  std::vector<uint8_t> bytes(static_cast<size_t>(size));
  size_t got = 0;
  while (got < bytes.size()) {
    const ssize_t n = ::read(fd, bytes.data() + got, bytes.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = n < 0 ? errno : 0;
      ::close(fd);
      QC_FAIL_INPUT("{}: reading the {} file failed after {} of {} bytes: {}", path, what, got, bytes.size(),
                    err != 0 ? std::strerror(err) : "the file shrank while it was being read");
    }
    got += static_cast<size_t>(n);
  }
  ::close(fd);
  return bytes;
}

int32_t read_i32(const std::vector<uint8_t>& bytes, size_t offset) {
  int32_t v;
  std::memcpy(&v, bytes.data() + offset, sizeof v);
  return v;
}

// Reads consecutive fp32 tensors from a byte buffer whose total size has been checked.
struct FloatCursor {
  const uint8_t* p;
  const uint8_t* base;      // the file's first byte, for offsets in messages
  const std::string& path;
  // Every weight must be finite: a NaN or infinity would surface much later as an internal check
  // in the decoder (no finite logits) instead of naming the file and the element here.
  std::vector<float> take(int64_t n) {
    std::vector<float> out(static_cast<size_t>(n));
    std::memcpy(out.data(), p, sizeof(float) * static_cast<size_t>(n));
    for (size_t i = 0; i < out.size(); ++i) {
      if (std::isfinite(out[i])) continue;
      uint32_t bits;
      std::memcpy(&bits, &out[i], 4);
      QC_FAIL_INPUT("{}: fp32 weight at byte offset {} (element {} of this tensor): expected a finite value, found {} "
                    "(bits 0x{:08x})",
                    path, (p - base) + 4 * i, i, out[i], bits);
    }
    p += sizeof(float) * static_cast<size_t>(n);
    return out;
  }
  void skip(int64_t n) { p += sizeof(float) * static_cast<size_t>(n); }
};

LinearLayer make_linear(std::string name, int64_t n, int64_t k, std::vector<float> w) {
  LinearLayer l;
  l.name = std::move(name);
  l.n_out = n;
  l.k_in = k;
  l.weight = std::move(w);
  return l;
}

// Names follow Hugging Face's LLaMA modules (llama2.c's wq..w3 in brackets).
void name_layers(Model& m) {
  for (size_t i = 0; i < m.layers.size(); ++i) {
    DecoderLayer& L = m.layers[i];
    const std::string p = fmt::format("layers.{}.", i);
    L.q.name = p + "self_attn.q_proj";
    L.k.name = p + "self_attn.k_proj";
    L.v.name = p + "self_attn.v_proj";
    L.o.name = p + "self_attn.o_proj";
    L.gate.name = p + "mlp.gate_proj";
    L.up.name = p + "mlp.up_proj";
    L.down.name = p + "mlp.down_proj";
  }
}

// The 7 header ints as a config (vocab given positive), validated against `path`.
ModelConfig config_from_header(const std::string& path, const int32_t* h, int32_t vocab) {
  const char* fields[] = {"dim", "hidden_dim", "n_layers", "n_heads", "n_kv_heads", "vocab_size", "seq_len"};
  for (int i = 0; i < 7; ++i) {
    const int32_t v = i == 5 ? vocab : h[i];
    QC_INPUT(v > 0, "{}: llama2.c header field `{}`: expected a positive value, found {}", path, fields[i], v);
  }
  ModelConfig c;
  c.arch = "llama2c";
  c.hidden = h[0];
  c.intermediate = h[1];
  c.n_layers = h[2];
  c.n_heads = h[3];
  c.n_kv_heads = h[4];
  c.vocab = vocab;
  c.max_seq_len = h[6];
  QC_INPUT(c.hidden % c.n_heads == 0, "{}: llama2.c header field `dim`: expected a multiple of n_heads = {}, found {}",
           path, c.n_heads, c.hidden);
  c.head_dim = c.hidden / c.n_heads;
  c.rope_theta = 10000.0;
  c.rms_eps = 1e-5f;
  c.rope_style = RopeStyle::interleaved;
  c.bos_id = 1;
  c.stop_ids = {1};  // run.c: "data-specific terminating condition: the BOS (=1) token delimits sequences"
  c.validate(path);
  return c;
}

// `expected` is computed in 128 bits: a corrupt header must not overflow into a plausible size.
void check_size(const std::string& path, const char* layout, __int128 expected_wide, size_t found) {
  QC_INPUT(expected_wide <= static_cast<__int128>(INT64_MAX),
           "{}: llama2.c {} checkpoint: the header's dimensions need more than 2^63 bytes, the file has {}", path,
           layout, found);
  const size_t expected = static_cast<size_t>(expected_wide);
  QC_INPUT(found == expected,
           "{}: llama2.c {} checkpoint: the header's dimensions need {} bytes, the file has {} ({})", path, layout,
           expected, found, found < expected ? "file too short: truncated?" : "trailing bytes: wrong dimensions?");
}

Model load_legacy(const std::string& path, const std::vector<uint8_t>& bytes) {
  const size_t header = 7 * sizeof(int32_t);
  QC_INPUT(bytes.size() >= header, "{}: llama2.c header: expected at least {} bytes, the file has {}", path, header,
           bytes.size());
  int32_t h[7];
  std::memcpy(h, bytes.data(), header);
  const bool shared = h[5] > 0;
  QC_INPUT(h[5] != INT32_MIN, "{}: llama2.c header field `vocab_size`: found {}", path, h[5]);
  Model m;
  m.config = config_from_header(path, h, shared ? h[5] : -h[5]);
  m.config.tie_embeddings = shared;
  const ModelConfig& c = m.config;
  const int64_t L = c.n_layers, D = c.hidden, H = c.intermediate, V = c.vocab;
  const int64_t kv_dim = c.n_kv_heads * c.head_dim;
  using W = __int128;
  const W floats = W(V) * D + W(L) * D + W(L) * D * D + W(2) * L * kv_dim * D + W(L) * D * D + W(L) * D +
                   W(3) * L * D * H + D + W(c.max_seq_len) * c.head_dim + (shared ? 0 : W(V) * D);
  check_size(path, "legacy", W(header) + 4 * floats, bytes.size());

  FloatCursor cur{bytes.data() + header, bytes.data(), path};
  m.embed = cur.take(V * D);
  m.layers.resize(static_cast<size_t>(L));
  for (auto& l : m.layers) l.attn_norm = cur.take(D);
  for (auto& l : m.layers) l.q = make_linear("", D, D, cur.take(D * D));
  for (auto& l : m.layers) l.k = make_linear("", kv_dim, D, cur.take(kv_dim * D));
  for (auto& l : m.layers) l.v = make_linear("", kv_dim, D, cur.take(kv_dim * D));
  for (auto& l : m.layers) l.o = make_linear("", D, D, cur.take(D * D));
  for (auto& l : m.layers) l.ffn_norm = cur.take(D);
  for (auto& l : m.layers) l.gate = make_linear("", H, D, cur.take(H * D));  // w1
  for (auto& l : m.layers) l.down = make_linear("", D, H, cur.take(D * H));  // w2
  for (auto& l : m.layers) l.up = make_linear("", H, D, cur.take(H * D));    // w3
  m.final_norm = cur.take(D);
  cur.skip(c.max_seq_len * c.head_dim);  // freq_cis_real and freq_cis_imag, [seq_len, head_size/2] each
  if (!shared) m.lm_head = cur.take(V * D);
  name_layers(m);
  return m;
}

Model load_v1(const std::string& path, const std::vector<uint8_t>& bytes) {
  QC_INPUT(bytes.size() >= kHeaderV1, "{}: llama2.c v1 header: expected {} bytes, the file has {}", path, kHeaderV1,
           bytes.size());
  const int32_t version = read_i32(bytes, 4);
  QC_INPUT(version == 1,
           "{}: llama2.c header field `version`: expected 1 (fp32){}, found {}", path,
           version == 2 ? "; version 2 is the Q8_0 int8 export, which qconform does not read" : "", version);
  int32_t h[7];
  std::memcpy(h, bytes.data() + 8, sizeof h);
  const uint8_t shared_byte = bytes[8 + sizeof h];
  QC_INPUT(shared_byte <= 1, "{}: llama2.c v1 header field `shared_classifier`: expected 0 or 1, found {}", path,
           shared_byte);
  const bool shared = shared_byte == 1;
  Model m;
  m.config = config_from_header(path, h, h[5]);
  m.config.tie_embeddings = shared;
  const ModelConfig& c = m.config;
  const int64_t L = c.n_layers, D = c.hidden, H = c.intermediate, V = c.vocab;
  const int64_t kv_dim = c.n_kv_heads * c.head_dim;
  using W = __int128;
  const W floats = W(2) * L * D + D + W(V) * D + W(2) * L * D * D + W(2) * L * kv_dim * D + W(3) * L * D * H +
                   (shared ? 0 : W(V) * D);
  check_size(path, "v1", W(kHeaderV1) + 4 * floats, bytes.size());

  FloatCursor cur{bytes.data() + kHeaderV1, bytes.data(), path};
  m.layers.resize(static_cast<size_t>(L));
  for (auto& l : m.layers) l.attn_norm = cur.take(D);
  for (auto& l : m.layers) l.ffn_norm = cur.take(D);
  m.final_norm = cur.take(D);
  m.embed = cur.take(V * D);
  for (auto& l : m.layers) l.q = make_linear("", D, D, cur.take(D * D));
  for (auto& l : m.layers) l.k = make_linear("", kv_dim, D, cur.take(kv_dim * D));
  for (auto& l : m.layers) l.v = make_linear("", kv_dim, D, cur.take(kv_dim * D));
  for (auto& l : m.layers) l.o = make_linear("", D, D, cur.take(D * D));
  for (auto& l : m.layers) l.gate = make_linear("", H, D, cur.take(H * D));  // w1
  for (auto& l : m.layers) l.down = make_linear("", D, H, cur.take(D * H));  // w2
  for (auto& l : m.layers) l.up = make_linear("", H, D, cur.take(H * D));    // w3
  if (!shared) m.lm_head = cur.take(V * D);
  name_layers(m);
  return m;
}

void append_floats(std::vector<uint8_t>& out, const std::vector<float>& v) {
  const auto* p = reinterpret_cast<const uint8_t*>(v.data());
  out.insert(out.end(), p, p + sizeof(float) * v.size());
}

}  // namespace

Model load_llama2c(const std::string& path) {
  const std::vector<uint8_t> bytes = read_file_bytes(path, "llama2.c checkpoint");
  QC_INPUT(bytes.size() >= 4, "{}: llama2.c checkpoint: expected a header, the file has {} bytes", path, bytes.size());
  uint32_t magic;
  std::memcpy(&magic, bytes.data(), sizeof magic);
  Model m = magic == kMagicV1 ? load_v1(path, bytes) : load_legacy(path, bytes);
  m.source = path;
  m.sha256 = sha256_digest(std::as_bytes(std::span(bytes)));
  m.check_shapes();
  return m;
}

std::vector<uint8_t> encode_llama2c_v1(const Model& m) {
  const ModelConfig& c = m.config;
  QC_CHECK(c.head_dim * c.n_heads == c.hidden && !c.qk_norm && !c.qkv_bias && c.rope_style == RopeStyle::interleaved,
           "the llama2.c v1 layout holds only llama2.c-shaped models");
  std::vector<uint8_t> out(kHeaderV1, 0);
  const int32_t h[9] = {static_cast<int32_t>(kMagicV1), 1, static_cast<int32_t>(c.hidden),
                        static_cast<int32_t>(c.intermediate), static_cast<int32_t>(c.n_layers),
                        static_cast<int32_t>(c.n_heads), static_cast<int32_t>(c.n_kv_heads),
                        static_cast<int32_t>(c.vocab), static_cast<int32_t>(c.max_seq_len)};
  std::memcpy(out.data(), h, sizeof h);
  out[sizeof h] = c.tie_embeddings ? 1 : 0;
  for (auto& l : m.layers) append_floats(out, l.attn_norm);
  for (auto& l : m.layers) append_floats(out, l.ffn_norm);
  append_floats(out, m.final_norm);
  append_floats(out, m.embed);
  for (auto& l : m.layers) append_floats(out, l.q.weight);
  for (auto& l : m.layers) append_floats(out, l.k.weight);
  for (auto& l : m.layers) append_floats(out, l.v.weight);
  for (auto& l : m.layers) append_floats(out, l.o.weight);
  for (auto& l : m.layers) append_floats(out, l.gate.weight);
  for (auto& l : m.layers) append_floats(out, l.down.weight);
  for (auto& l : m.layers) append_floats(out, l.up.weight);
  if (!c.tie_embeddings) append_floats(out, m.lm_head);
  return out;
}

}  // namespace qc
