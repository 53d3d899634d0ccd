// The identity contract (check C0): every run writes a manifest, and `join` verifies field by
// field that two runs differ only in the declared treatment.
//
// A manifest records the SHA-256 of every input file, the project version, the arm label *and*
// the kernel identity the arm itself reported when it ran (its `RunRecord`: the treatment
// evidence), the platform (CPU, compiler, MXCSR, library versions, GPU driver when present), the
// environment variables that select kernels, and the run's configuration. `join_manifests`
// fails closed: any mismatch outside the treatment, any malformed digest, missing field or
// missing kernel evidence, an input file that changed on disk since it was hashed, or a
// treatment that is identical on both sides is a violation, and C0 fails. What each field
// means and every rule: docs/identity-contract.md.
#pragma once

#include <nlohmann/json.hpp>

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "qconform/arm.hpp"
#include "qconform/check.hpp"

namespace qc {

inline constexpr int kManifestSchemaVersion = 1;
inline constexpr std::string_view kManifestFormat = "qconform-manifest";

// The kinds of run that write a manifest.
inline constexpr std::string_view kManifestKinds[] = {"capture", "verify", "generate", "replay", "sweep", "conform"};

struct ManifestInput {
  std::string path;    // absolute when recorded by `make_manifest`
  std::string sha256;  // `sha256:<64 lowercase hex>`
};

struct Manifest {
  int schema_version = kManifestSchemaVersion;
  std::string kind;             // one of `kManifestKinds`
  std::string created;          // UTC, ISO 8601: "2025-01-31T12:34:56Z" (never compared)
  std::string project_version;  // `qc::version()` of the binary that ran
  // role -> file: "operands", "model", "tokenizer", "quantization_config", "prompts",
  // "predictions", ... Role names match [a-z0-9_.-]+.
  std::map<std::string, ManifestInput> inputs;
  std::string arm;                      // the arm label the run asked for
  std::optional<RunRecord> treatment;   // what the arm reported when it ran; absent = no kernel evidence
  nlohmann::json platform = nlohmann::json::object();  // `environment_stamp()` plus any device/driver fields
  std::map<std::string, std::string> selection_env;    // kernel-selecting environment variables that were set
  nlohmann::json config = nlohmann::json::object();    // free: decoding parameters, scale modes, seeds, ...
  // Set when this run consumed data whose join did not verify (`--allow-unverified`); every
  // output it touches carries the flag and the violations.
  bool allow_unverified = false;
  std::vector<std::string> unverified_joins;
};

// A digest in the manifest form `sha256:<64 lowercase hex>`.
bool is_valid_digest(std::string_view digest);

// The kernel-selecting environment of this process: every set variable named `QC_*`, `VLLM_*`,
// `SGLANG_*`, `CUDA_*`, `CUBLAS_*`, `CUBLASLT_*`, `NVIDIA_TF32_OVERRIDE`, `TORCH_*`, `TRITON_*`,
// `DNNL_*`, `ONEDNN_*`, `OMP_*`, `MKL_*`, `KMP_*`, `GOMP_*`.
std::map<std::string, std::string> selection_environment();
// True when `name` is one of the variables `selection_environment` records.
bool is_selection_variable(std::string_view name);

// Now, UTC, ISO 8601 with a `Z` suffix.
std::string utc_now_iso8601();

// A manifest for a run of `kind`: hashes every input file (role, path) now, records absolute
// paths, the project version, `environment_stamp()` as the platform and this process's
// selection environment. `treatment` is the `RunRecord` the arm returned (pass it after the arm
// ran; `std::nullopt` records that there is no kernel evidence, which `join` refuses). `digests`:
// inputs this run has hashed already ("sha256:<hex>" by path), recorded without reading them again.
Manifest make_manifest(std::string_view kind, std::string arm, std::optional<RunRecord> treatment,
                       const std::vector<std::pair<std::string, std::string>>& inputs,
                       nlohmann::json config = nlohmann::json::object(),
                       const std::map<std::string, std::string>& digests = {});
// Hashes `path` now (or takes `digest`, the run's own hash of it) and records it under `role`
// (replacing an earlier entry of that role).
void add_input(Manifest& m, const std::string& role, const std::string& path, const std::string& digest = "");

nlohmann::json to_json(const Manifest& m);
// Strict: every required field present with its type, every digest well formed, `kind` known.
// Errors are `qc::Error` (input) naming `file_for_errors`, the field, what was expected and
// what was found.
Manifest manifest_from_json(const nlohmann::json& j, const std::string& file_for_errors);

// The pretty-printed JSON write_manifest writes.
std::string manifest_text(const Manifest& m);
// Atomic write (temporary file + rename), pretty-printed JSON.
void write_manifest(const std::string& path, const Manifest& m);
// Reads and parses strictly (see `manifest_from_json`).
Manifest read_manifest(const std::string& path);

// ---- join ----------------------------------------------------------------------------------

// One compared field. `field` is a dotted path into the manifest JSON (`inputs.model.sha256`,
// `treatment.kernel`, `config.decoding.temperature`, `platform.mxcsr.ftz`).
struct FieldResult {
  std::string field;
  // "equal", "differs (treatment)", "differs (not compared)", "rehashed", "not rehashed",
  // or a violation: "mismatch", "missing", "malformed", "changed on disk", "treatment identical",
  // "no kernel evidence", "inconsistent", "unverified input".
  std::string status;
  nlohmann::json a, b;  // the values on each side (null when absent)
  std::string note;     // one sentence, e.g. the path of a file that changed on disk
  bool violation = false;
};

struct JoinResult {
  std::string treatment;
  std::string name_a, name_b;  // the manifests' file names (or "A"/"B")
  std::vector<FieldResult> fields;
  std::string treatment_change;  // what the treatment changed ("A -> B; kernel x -> y"), or ""
  CheckResult c0;  // verdict pass iff there is no violation; points_to "provenance, not arithmetic"
  bool verified() const;
  std::vector<const FieldResult*> violations() const;
};

// The JSON-level join, so manifests that do not parse strictly (a malformed digest, a missing
// field, no kernel evidence) are still compared and the problem reported per field instead of
// aborting. `treatment` is "arm" (the arm label, the kernel evidence `treatment.*` and the
// selection environment may differ; the label or the kernel evidence must) or a dotted field
// path (`config.scale_mode`, `inputs.model`): that subtree must differ, everything else, the
// arm and its kernel evidence included, must be equal. `rehash`: files recorded under
// `inputs` that exist on disk are hashed again and compared with the recorded digest.
// `join_manifest_fields` (the manifest layer, src/manifest/) compares the fields; `join_manifest_json`
// and `join_manifests` (the C0 check, src/checks/c0_identity.cpp) add the C0 verdict `c0`.
JoinResult join_manifest_fields(const nlohmann::json& a, const nlohmann::json& b, const std::string& treatment,
                                bool rehash, std::string name_a = "A", std::string name_b = "B");
JoinResult join_manifest_json(const nlohmann::json& a, const nlohmann::json& b, const std::string& treatment,
                              bool rehash, std::string name_a = "A", std::string name_b = "B");
JoinResult join_manifests(const Manifest& a, const Manifest& b, const std::string& treatment, bool rehash);

nlohmann::json to_json(const JoinResult& r);
// One line per violation: "<field>: <status>: A=<value> B=<value> (<note>)".
std::vector<std::string> describe_violations(const JoinResult& r);

// Marks `m` as having consumed the unverified join `r` (the `--allow-unverified` record).
void record_unverified(Manifest& m, const JoinResult& r);

}  // namespace qc
