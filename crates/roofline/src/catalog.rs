//! The GPU and model catalog: the embedded `catalog.toml` plus user additions (`--catalog`).

use std::path::Path;

use serde::{de::DeserializeOwned, Deserialize, Serialize};

use crate::{GpuSpec, ModelSpec, RooflineError};

/// The catalog shipped with the crate (SIMULATOR.md §5).
pub const BUILTIN_CATALOG: &str = include_str!("../catalog.toml");

/// GPUs and models by id and alias.
#[derive(Debug, Clone, PartialEq)]
pub struct Catalog {
    gpus: Vec<GpuSpec>,
    models: Vec<ModelSpec>,
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

impl Catalog {
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
        }
    }

    /// Adds the `[[gpu]]` and `[[model]]` tables of a TOML file (`--catalog FILE`). A table
    /// whose `id` matches an existing entry (case-insensitive) overrides only the fields it
    /// lists; any other table is a new entry and must be complete.
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
        self.gpus = gpus;
        self.models = models;
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
