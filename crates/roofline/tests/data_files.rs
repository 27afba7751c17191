//! Reading model configs and catalogs from files: Hugging Face `config.json` fixtures and a
//! user catalog for `--catalog`.

#![allow(clippy::unwrap_used)]

use std::path::PathBuf;

use servebench_roofline::{
    kv_capacity, Catalog, Deployment, Dtype, KvDtype, KvSizing, ModelSpec, RooflineError,
};

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

/// The shape fields, without id and aliases.
fn shape(m: &ModelSpec) -> ModelSpec {
    ModelSpec {
        id: String::new(),
        aliases: Vec::new(),
        head_dim: Some(m.head_dim()),
        ..m.clone()
    }
}

#[test]
fn llama_config_matches_the_catalog_entry() {
    let m = ModelSpec::from_hf_config(fixture("Llama-3.1-8B-Instruct/config.json")).unwrap();
    // No `_name_or_path`: the directory names the model.
    assert_eq!(m.id, "Llama-3.1-8B-Instruct");
    // `head_dim` absent: d / H.
    assert_eq!(m.head_dim, None);
    assert_eq!(m.head_dim(), 128);
    let builtin = Catalog::builtin();
    assert_eq!(shape(&m), shape(builtin.model("llama-3.1-8b").unwrap()));
    assert_eq!(
        m.n_total(),
        builtin.model("llama-3.1-8b").unwrap().n_total()
    );
}

#[test]
fn qwen3_config_keeps_head_dim_and_tied_embeddings() {
    let m = ModelSpec::from_hf_config(fixture("qwen3-0.6b/config.json")).unwrap();
    assert_eq!(m.id, "Qwen/Qwen3-0.6B");
    assert_eq!(m.head_dim, Some(128));
    assert!(m.tie_word_embeddings);
    assert_eq!(
        shape(&m),
        shape(Catalog::builtin().model("qwen3-0.6b").unwrap())
    );
}

#[test]
fn qwen3_moe_config_matches_the_catalog_entry() {
    let m = ModelSpec::from_hf_config(fixture("qwen3-30b-a3b/config.json")).unwrap();
    assert_eq!(m.moe(), Some((128, 8, 768)));
    assert_eq!(
        shape(&m),
        shape(Catalog::builtin().model("qwen3-30b-a3b").unwrap())
    );
}

#[test]
fn mixtral_config_uses_local_experts_and_intermediate_size() {
    let m = ModelSpec::from_hf_config(fixture("mixtral-8x7b/config.json")).unwrap();
    assert_eq!(m.num_experts, Some(8));
    assert_eq!(m.moe_intermediate_size, None);
    // Mixtral's experts are `intermediate_size` wide.
    assert_eq!(m.moe(), Some((8, 2, 14336)));
    // 46.7 B parameters, 12.9 B active.
    assert!((m.n_total() / 1e9 - 46.7).abs() < 0.05, "{}", m.n_total());
    assert!((m.n_active() / 1e9 - 12.9).abs() < 0.05, "{}", m.n_active());
}

#[test]
fn multimodal_config_reads_the_text_model() {
    let m = ModelSpec::from_hf_config(fixture("vision-lm/config.json")).unwrap();
    assert_eq!(m.num_hidden_layers, 40);
    assert_eq!(m.hidden_size, 5120);
    assert_eq!(m.head_dim(), 128);
    assert_eq!(m.vocab_size, 131_072);
    // `num_experts: null` means dense.
    assert!(!m.is_moe());
    // `num_key_value_heads` split: 2·40·8·128·2 bytes.
    assert_eq!(m.kv_bytes_per_token(KvDtype::Auto), 163_840.0);
}

#[test]
fn config_errors_name_the_file_and_key() {
    let e = ModelSpec::from_hf_config(fixture("broken/config.json"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("broken/config.json"), "{e}");
    assert!(e.contains("missing key"), "{e}");
    let e = ModelSpec::from_hf_config(fixture("missing/config.json")).unwrap_err();
    assert!(matches!(e, RooflineError::Io { .. }));
    assert!(e.to_string().contains("cannot read"), "{e}");
    let e = ModelSpec::from_hf_config_str("{\"num_hidden_layers\": -1}", "x").unwrap_err();
    assert!(
        e.contains("'num_hidden_layers' must be a non-negative integer"),
        "{e}"
    );
    let e = ModelSpec::from_hf_config_str("[1, 2]", "x").unwrap_err();
    assert!(e.contains("not a JSON object"), "{e}");
    let e = ModelSpec::from_hf_config_str("{", "x").unwrap_err();
    assert!(e.contains("not valid JSON"), "{e}");
}

#[test]
fn hf_config_model_deploys_and_sizes() {
    let m = ModelSpec::from_hf_config(fixture("mixtral-8x7b/config.json")).unwrap();
    let c = Catalog::builtin();
    let d = Deployment::new(
        c.gpu("h100").unwrap().clone(),
        m,
        Dtype::Bf16,
        KvDtype::Auto,
        2,
    )
    .unwrap();
    let cap = kv_capacity(&d, &KvSizing::server_defaults(&d)).unwrap();
    assert!(cap.num_gpu_blocks > 10_000, "{cap:?}");
    let one = d.decode_tpot(1000, 1);
    let many = d.decode_tpot(1000, 64);
    // 64 tokens touch nearly all 8 experts, one token touches 2.
    assert!(
        many.bytes - 64.0 * 1001.0 * d.kv_bytes_per_token()
            > 3.0 * (one.bytes - 1001.0 * d.kv_bytes_per_token())
    );
}

#[test]
fn user_catalog_file_overrides_and_adds() {
    let mut c = Catalog::builtin();
    c.merge_file(fixture("user_catalog.toml")).unwrap();
    let h100 = c.gpu("h100").unwrap();
    assert_eq!((h100.mbu, h100.mfu_bf16), (0.82, 0.65));
    assert_eq!(h100.usable_gib, 79.2);
    let ada = c.gpu("RTX6000ADA").unwrap();
    assert_eq!(ada.id, "rtx-6000-ada");
    assert_eq!(ada.fp8_tflops, Some(728.5));
    let mixtral = c.model("mistralai/Mixtral-8x7B-Instruct-v0.1").unwrap();
    assert_eq!(mixtral.moe(), Some((8, 2, 14336)));
    // The tuned H100 changes the step time: the worked example's decode gets faster.
    let base = Catalog::builtin();
    let model = base.model("llama-3.1-8b").unwrap().clone();
    let before = Deployment::new(
        base.gpu("h100").unwrap().clone(),
        model.clone(),
        Dtype::Bf16,
        KvDtype::Auto,
        1,
    )
    .unwrap();
    let after = Deployment::new(h100.clone(), model, Dtype::Bf16, KvDtype::Auto, 1).unwrap();
    assert!(after.decode_tpot(1024, 1).total < before.decode_tpot(1024, 1).total);
}

#[test]
fn missing_catalog_file_is_an_io_error() {
    let mut c = Catalog::builtin();
    let e = c.merge_file(fixture("nope.toml")).unwrap_err();
    assert!(matches!(e, RooflineError::Io { .. }), "{e}");
    assert!(e.to_string().contains("nope.toml"));
}
