//! The GPU and model catalog: the embedded `catalog.toml` plus user additions (`--catalog`).

use std::path::Path;

use serde::{de::DeserializeOwned, Deserialize, Serialize};

use crate::{GpuSpec, ModelSpec, RooflineError, VisionSpec};

/// The catalog shipped with the crate (docs/simulator.md §5).
pub const BUILTIN_CATALOG: &str = include_str!("../catalog.toml");

/// GPUs and models by id and alias.
#[derive(Debug, Clone, PartialEq)]
pub struct Catalog {
    gpus: Vec<GpuSpec>,
    models: Vec<ModelSpec>,
    visions: Vec<VisionSpec>,
}

/// A catalog document before its tables become specs: tables stay raw so that a user entry
/// can override single fields of a built-in one.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CatalogDoc {
    #[serde(default)]
    gpu: Vec<toml::Table>,
    #[serde(default)]
    model: Vec<toml::Table>,
    #[serde(default)]
    vision: Vec<toml::Table>,
}

/// Entries the catalog holds, looked up by id or alias.
trait Entry: Serialize + DeserializeOwned {
    const KIND: &'static str;
    fn id(&self) -> &str;
    fn aliases(&self) -> &[String];
    fn validate(&self) -> Result<(), RooflineError>;
}

impl Entry for GpuSpec {
    const KIND: &'static str = "gpu";
    fn id(&self) -> &str {
        &self.id
    }
    fn aliases(&self) -> &[String] {
        &self.aliases
    }
    fn validate(&self) -> Result<(), RooflineError> {
        GpuSpec::validate(self)
    }
}

impl Entry for ModelSpec {
    const KIND: &'static str = "model";
    fn id(&self) -> &str {
        &self.id
    }
    fn aliases(&self) -> &[String] {
        &self.aliases
    }
    fn validate(&self) -> Result<(), RooflineError> {
        ModelSpec::validate(self)
    }
}

impl Entry for VisionSpec {
    const KIND: &'static str = "vision";
    fn id(&self) -> &str {
        &self.id
    }
    fn aliases(&self) -> &[String] {
        &self.aliases
    }
    fn validate(&self) -> Result<(), RooflineError> {
        VisionSpec::validate(self)
    }
}

impl Catalog {
    /// The vision facts of a model (`[[vision]]`), looked up like [`Catalog::model`];
    /// `None` for a text-only model.
    pub fn vision(&self, name: &str) -> Option<&VisionSpec> {
        lookup(&self.visions, name)
    }

    /// The built-in catalog.
    pub fn builtin() -> Catalog {
        let mut catalog = Catalog::empty();
        // The embedded document is part of the source; a unit test parses it, so failure here
        // is a build defect rather than a runtime condition.
        #[allow(clippy::expect_used)]
        catalog
            .merge_toml_str(BUILTIN_CATALOG, "built-in")
            .expect("the built-in catalog.toml is valid");
        catalog
    }

    /// A catalog without entries.
    pub fn empty() -> Catalog {
        Catalog {
            gpus: Vec::new(),
            models: Vec::new(),
            visions: Vec::new(),
        }
    }

    /// Adds the `[[gpu]]`, `[[model]]` and `[[vision]]` tables of a TOML file (`--catalog
    /// FILE`). A table whose `id` matches an existing entry (case-insensitive) overrides only the
    /// fields it lists; any other table is a new entry and must be complete.
    pub fn merge_file(&mut self, path: impl AsRef<Path>) -> Result<(), RooflineError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|source| RooflineError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        self.merge_toml_str(&text, &path.display().to_string())
    }

    /// [`Catalog::merge_file`] on a string; `origin` names the source in error messages.
    /// Either every entry of the document is applied or none is.
    pub fn merge_toml_str(&mut self, text: &str, origin: &str) -> Result<(), RooflineError> {
        let doc: CatalogDoc = toml::from_str(text).map_err(|e| RooflineError::Catalog {
            origin: origin.to_string(),
            message: e.to_string(),
        })?;
        let mut gpus = self.gpus.clone();
        let mut models = self.models.clone();
        for table in doc.gpu {
            merge_entry(&mut gpus, table, origin)?;
        }
        for table in doc.model {
            merge_entry(&mut models, table, origin)?;
        }
        let mut visions = self.visions.clone();
        for table in doc.vision {
            merge_entry(&mut visions, table, origin)?;
        }
        self.gpus = gpus;
        self.models = models;
        self.visions = visions;
        Ok(())
    }

    /// Adds a GPU, replacing one with the same id.
    pub fn insert_gpu(&mut self, gpu: GpuSpec) {
        upsert(&mut self.gpus, gpu);
    }

    /// Adds a model, replacing one with the same id.
    pub fn insert_model(&mut self, model: ModelSpec) {
        upsert(&mut self.models, model);
    }

    /// All GPUs, in catalog order.
    pub fn gpus(&self) -> &[GpuSpec] {
        &self.gpus
    }

    /// All models, in catalog order.
    pub fn models(&self) -> &[ModelSpec] {
        &self.models
    }

    /// Looks a GPU up by id or alias (case-insensitive).
    pub fn gpu(&self, name: &str) -> Result<&GpuSpec, RooflineError> {
        lookup(&self.gpus, name).ok_or_else(|| RooflineError::UnknownGpu {
            id: name.to_string(),
            known: known_ids(&self.gpus),
        })
    }

    /// Looks a model up by id or alias (case-insensitive). A Hugging Face name whose
    /// organisation differs (or is missing) still matches when its last path segment names
    /// exactly one model's alias, so `Llama-3.1-8B-Instruct` finds `llama-3.1-8b`.
    pub fn model(&self, name: &str) -> Result<&ModelSpec, RooflineError> {
        lookup(&self.models, name).ok_or_else(|| RooflineError::UnknownModel {
            id: name.to_string(),
            known: known_ids(&self.models),
        })
    }
}

impl Default for Catalog {
    fn default() -> Self {
        Catalog::builtin()
    }
}

fn merge_entry<T: Entry>(
    entries: &mut Vec<T>,
    mut table: toml::Table,
    origin: &str,
) -> Result<(), RooflineError> {
    let err = |message: String| RooflineError::Catalog {
        origin: origin.to_string(),
        message,
    };
    let id = match table.get("id") {
        Some(toml::Value::String(id)) if !id.trim().is_empty() => id.trim().to_string(),
        _ => return Err(err(format!("a [[{}]] table needs a string 'id'", T::KIND))),
    };
    let existing = entries
        .iter()
        .position(|e| e.id().eq_ignore_ascii_case(&id));
    let merged = match existing {
        Some(i) => {
            let mut base = toml::Table::try_from(&entries[i])
                .map_err(|e| err(format!("{} '{id}': {e}", T::KIND)))?;
            // The existing spelling of the id is kept so lookups and reports stay stable.
            table.remove("id");
            if table.contains_key("num_local_experts") {
                base.remove("num_experts");
            }
            base.extend(table);
            base
        }
        None => table,
    };
    let entry: T = merged
        .try_into()
        .map_err(|e: toml::de::Error| err(format!("{} '{id}': {}", T::KIND, e.message())))?;
    entry
        .validate()
        .map_err(|e| err(format!("{} '{id}': {e}", T::KIND)))?;
    match existing {
        Some(i) => entries[i] = entry,
        None => entries.push(entry),
    }
    Ok(())
}

fn upsert<T: Entry>(entries: &mut Vec<T>, entry: T) {
    match entries
        .iter()
        .position(|e| e.id().eq_ignore_ascii_case(entry.id()))
    {
        Some(i) => entries[i] = entry,
        None => entries.push(entry),
    }
}

fn lookup<'a, T: Entry>(entries: &'a [T], name: &str) -> Option<&'a T> {
    let name = name.trim();
    let exact = |e: &&T| {
        e.id().eq_ignore_ascii_case(name)
            || e.aliases().iter().any(|a| a.eq_ignore_ascii_case(name))
    };
    if let Some(e) = entries.iter().find(exact) {
        return Some(e);
    }
    let base = basename(name);
    let mut by_base = entries.iter().filter(|e| {
        e.aliases()
            .iter()
            .any(|a| basename(a).eq_ignore_ascii_case(base))
    });
    match (by_base.next(), by_base.next()) {
        (Some(e), None) => Some(e),
        _ => None,
    }
}

fn basename(name: &str) -> &str {
    name.rsplit('/').next().unwrap_or(name)
}

fn known_ids<T: Entry>(entries: &[T]) -> String {
    entries.iter().map(Entry::id).collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::BatchClass;

    #[test]
    fn builtin_has_every_gpu_and_model_of_the_tables() {
        let c = Catalog::builtin();
        let gpus: Vec<&str> = c.gpus().iter().map(|g| g.id.as_str()).collect();
        assert_eq!(
            gpus,
            [
                "a10g",
                "l4",
                "a40",
                "a100-40g",
                "a100-80g",
                "h100-pcie",
                "h100",
                "h200",
                "b200",
                "mi300x"
            ]
        );
        let models: Vec<&str> = c.models().iter().map(|m| m.id.as_str()).collect();
        assert_eq!(
            models,
            [
                "llama-3.1-8b",
                "llama-3.1-70b",
                "qwen3-0.6b",
                "qwen2.5-7b",
                "mistral-7b",
                "qwen3-30b-a3b"
            ]
        );
        for g in c.gpus() {
            g.validate().unwrap();
        }
    }

    #[test]
    fn gpu_table_values() {
        let c = Catalog::builtin();
        // (id, bf16, fp8, TB/s, usable GiB, link, class, mfu bf16, mfu fp8, mbu, calibrated)
        let h100 = c.gpu("h100").unwrap();
        assert_eq!(
            (
                h100.bf16_tflops,
                h100.fp8_tflops,
                h100.mem_bw_tbps,
                h100.usable_gib
            ),
            (989.4, Some(1978.9), 3.35, 79.2)
        );
        assert_eq!(
            (h100.link_gbps, h100.batch_class),
            (360.0, BatchClass::Large)
        );
        assert_eq!(
            (h100.mfu_bf16, h100.mfu_fp8, h100.mbu),
            (0.60, Some(0.42), 0.78)
        );
        let a40 = c.gpu("a40").unwrap();
        assert_eq!((a40.fp8_tflops, a40.mfu_fp8), (None, None));
        assert_eq!(a40.batch_class, BatchClass::Small);
        // A100 80 GB is ≥ 70 GiB yet gets the small defaults.
        assert_eq!(c.gpu("a100-80g").unwrap().batch_class, BatchClass::Small);
        assert!(!c.gpu("b200").unwrap().calibrated);
        assert!(!c.gpu("mi300x").unwrap().calibrated);
        assert!(c.gpu("h200").unwrap().calibrated);
        assert_eq!(c.gpu("h200").unwrap().mbu, 0.70);
        assert_eq!(c.gpu("mi300x").unwrap().mfu_fp8, Some(0.20));
    }

    #[test]
    fn lookups_accept_aliases_in_any_case() {
        let c = Catalog::builtin();
        assert_eq!(c.gpu("H100").unwrap().id, "h100");
        assert_eq!(c.gpu("h100-sxm").unwrap().id, "h100");
        assert_eq!(c.gpu("A100").unwrap().id, "a100-80g");
        assert_eq!(
            c.model("meta-llama/Llama-3.1-8B-Instruct").unwrap().id,
            "llama-3.1-8b"
        );
        assert_eq!(
            c.model("meta-llama/llama-3.1-8b-instruct").unwrap().id,
            "llama-3.1-8b"
        );
        assert_eq!(c.model("Qwen/Qwen3-30B-A3B").unwrap().id, "qwen3-30b-a3b");
        // A mirror's organisation or a bare repository name still resolves.
        assert_eq!(
            c.model("my-mirror/Llama-3.1-8B-Instruct").unwrap().id,
            "llama-3.1-8b"
        );
        assert_eq!(c.model("Qwen2.5-7B-Instruct").unwrap().id, "qwen2.5-7b");
    }

    #[test]
    fn unknown_ids_list_the_known_ones() {
        let c = Catalog::builtin();
        let e = c.gpu("v100").unwrap_err().to_string();
        assert!(
            e.starts_with("unknown GPU 'v100'; known GPUs: a10g, l4, a40"),
            "{e}"
        );
        assert!(e.contains("mi300x"), "{e}");
        let e = c.model("gpt-5").unwrap_err().to_string();
        assert!(
            e.starts_with("unknown model 'gpt-5'; known models: llama-3.1-8b, llama-3.1-70b"),
            "{e}"
        );
        assert!(matches!(
            c.model("gpt-5"),
            Err(RooflineError::UnknownModel { .. })
        ));
    }

    #[test]
    fn merge_overrides_fields_and_adds_entries() {
        let mut c = Catalog::builtin();
        c.merge_toml_str(
            r#"
            [[gpu]]
            id = "H100"
            mbu = 0.8
            calibrated = false

            [[gpu]]
            id = "rtx-4090"
            aliases = ["4090"]
            bf16_tflops = 165.2
            fp8_tflops = 330.3
            mem_bw_tbps = 1.008
            usable_gib = 23.5
            link_gbps = 25
            batch_class = "small"
            mfu_bf16 = 0.5
            mbu = 0.75

            [[model]]
            id = "llama-3.1-8b"
            max_position_embeddings = 8192
            "#,
            "test",
        )
        .unwrap();
        let h100 = c.gpu("h100").unwrap();
        assert_eq!((h100.mbu, h100.calibrated), (0.8, false));
        assert_eq!(h100.id, "h100");
        assert_eq!(h100.bf16_tflops, 989.4, "untouched fields stay");
        let new = c.gpu("4090").unwrap();
        assert_eq!(new.id, "rtx-4090");
        assert_eq!(new.link_gbps, 25.0);
        let m = c.model("llama-3.1-8b").unwrap();
        assert_eq!(m.max_position_embeddings, 8192);
        assert_eq!(m.hidden_size, 4096);
        assert_eq!(c.gpus().len(), 11);
    }

    #[test]
    fn invalid_merges_change_nothing() {
        let mut c = Catalog::builtin();
        let before = c.clone();
        let cases = [
            (
                "[[gpu]]\nid = \"h100\"\nmbu = 0.8\n[[gpu]]\nid = \"x\"\nbf16_tflops = 1.0\n",
                "missing field",
            ),
            ("[[gpu]]\nid = \"h100\"\nmbuu = 0.8\n", "unknown field"),
            ("[[gpu]]\nname = \"no id\"\n", "needs a string 'id'"),
            ("[[gpu]]\nid = \"h100\"\nmbu = 1.5\n", "at most 1"),
            (
                "[[model]]\nid = \"llama-3.1-8b\"\nnum_key_value_heads = 7\n",
                "multiple of",
            ),
            ("[[gpus]]\nid = \"h100\"\n", "unknown field"),
            ("not toml [", "invalid catalog test"),
        ];
        for (text, needle) in cases {
            let e = c.merge_toml_str(text, "test").unwrap_err().to_string();
            assert!(e.contains(needle), "{text:?}: {e}");
            assert!(e.starts_with("invalid catalog test"), "{e}");
            assert_eq!(c, before);
        }
    }

    #[test]
    fn merge_accepts_mixtral_expert_key() {
        let mut c = Catalog::builtin();
        c.merge_toml_str(
            "[[model]]\nid = \"qwen3-30b-a3b\"\nnum_local_experts = 64\n",
            "test",
        )
        .unwrap();
        assert_eq!(c.model("qwen3-30b-a3b").unwrap().num_experts, Some(64));
    }

    #[test]
    fn insert_replaces_by_id() {
        let mut c = Catalog::builtin();
        let mut g = c.gpu("l4").unwrap().clone();
        g.mbu = 0.5;
        c.insert_gpu(g);
        assert_eq!(c.gpu("l4").unwrap().mbu, 0.5);
        assert_eq!(c.gpus().len(), 10);
        let custom = crate::GpuSpec::from_spec_str("100,200,1,40").unwrap();
        c.insert_gpu(custom);
        assert_eq!(c.gpu("custom").unwrap().bf16_tflops, 100.0);
    }
}
