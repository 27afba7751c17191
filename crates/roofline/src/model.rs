//! Model descriptions and the quantities of docs/simulator.md §3.1.

use serde::{Deserialize, Serialize};

use crate::{Dtype, KvDtype, RooflineError};

/// One model of the catalog (`[[model]]` table). Field names are the Hugging Face
/// `config.json` keys, so a config file and a catalog entry read alike.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelSpec {
    /// Catalog id (`llama-3.1-8b`).
    pub id: String,
    /// Other names accepted by lookups, typically Hugging Face repository names.
    #[serde(default)]
    pub aliases: Vec<String>,
    /// `L`.
    pub num_hidden_layers: u32,
    /// `d`.
    pub hidden_size: u32,
    /// `H`, query heads.
    pub num_attention_heads: u32,
    /// `Hkv`, KV heads.
    pub num_key_value_heads: u32,
    /// `hd`; absent means `d / H`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub head_dim: Option<u32>,
    /// `F`, the dense MLP width (for MoE models, the dense width the config lists, unused).
    pub intermediate_size: u32,
    /// `V`.
    pub vocab_size: u32,
    /// Does the LM head share the input embedding table?
    #[serde(default)]
    pub tie_word_embeddings: bool,
    /// The default `max_model_len`.
    pub max_position_embeddings: u32,
    /// `E`, routed experts per MoE layer; absent (or 0) for dense models.
    #[serde(
        default,
        alias = "num_local_experts",
        skip_serializing_if = "Option::is_none"
    )]
    pub num_experts: Option<u32>,
    /// `k`, experts each token is routed to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub num_experts_per_tok: Option<u32>,
    /// `F_e`, one expert's MLP width; absent means `intermediate_size` (Mixtral's convention).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub moe_intermediate_size: Option<u32>,
}

impl ModelSpec {
    /// Does `name` (case-insensitive) name this model, by id or alias?
    pub fn matches(&self, name: &str) -> bool {
        self.id.eq_ignore_ascii_case(name)
            || self.aliases.iter().any(|a| a.eq_ignore_ascii_case(name))
    }

    /// Checks that the shape is usable (non-zero sizes, heads that group, a sane MoE).
    pub fn validate(&self) -> Result<(), RooflineError> {
        let bad = |msg: String| {
            Err(RooflineError::Invalid(format!(
                "model '{}': {msg}",
                self.id
            )))
        };
        for (name, v) in [
            ("num_hidden_layers", self.num_hidden_layers),
            ("hidden_size", self.hidden_size),
            ("num_attention_heads", self.num_attention_heads),
            ("num_key_value_heads", self.num_key_value_heads),
            ("vocab_size", self.vocab_size),
            ("max_position_embeddings", self.max_position_embeddings),
        ] {
            if v == 0 {
                return bad(format!("{name} must be positive"));
            }
        }
        if self.head_dim == Some(0) {
            return bad("head_dim must be positive".into());
        }
        if self.head_dim.is_none() && self.hidden_size % self.num_attention_heads != 0 {
            return bad(format!(
                "hidden_size {} is not a multiple of num_attention_heads {}; give head_dim",
                self.hidden_size, self.num_attention_heads
            ));
        }
        if self.num_attention_heads % self.num_key_value_heads != 0 {
            return bad(format!(
                "num_attention_heads {} is not a multiple of num_key_value_heads {}",
                self.num_attention_heads, self.num_key_value_heads
            ));
        }
        if let Some((e, k, fe)) = self.moe() {
            if k == 0 || k > e {
                return bad(format!("num_experts_per_tok {k} must be in 1..={e}"));
            }
            if fe == 0 {
                return bad("moe_intermediate_size must be positive".into());
            }
        } else if self.intermediate_size == 0 {
            return bad("intermediate_size must be positive".into());
        }
        Ok(())
    }

    /// `(E, k, F_e)` for a mixture-of-experts model, `None` for a dense one.
    pub fn moe(&self) -> Option<(u32, u32, u32)> {
        match self.num_experts {
            Some(e) if e > 0 => Some((
                e,
                self.num_experts_per_tok.unwrap_or(1),
                self.moe_intermediate_size.unwrap_or(self.intermediate_size),
            )),
            _ => None,
        }
    }

    /// Is this a mixture-of-experts model?
    pub fn is_moe(&self) -> bool {
        self.moe().is_some()
    }

    /// `hd`: the config's `head_dim`, else `d / H`.
    pub fn head_dim(&self) -> u32 {
        self.head_dim
            .unwrap_or(self.hidden_size / self.num_attention_heads.max(1))
    }

    /// `P_attn = 2·d·H·hd + 2·d·Hkv·hd` per layer (q, o and k, v projections).
    pub fn p_attn(&self) -> f64 {
        let (d, hd) = (f64::from(self.hidden_size), f64::from(self.head_dim()));
        2.0 * d * f64::from(self.num_attention_heads) * hd
            + 2.0 * d * f64::from(self.num_key_value_heads) * hd
    }

    /// MLP parameters per layer: `3·d·F` dense; MoE `E·3·d·F_e + d·E` (router included).
    pub fn p_mlp_total(&self) -> f64 {
        let d = f64::from(self.hidden_size);
        match self.moe() {
            Some((e, _, fe)) => {
                let e = f64::from(e);
                e * 3.0 * d * f64::from(fe) + d * e
            }
            None => 3.0 * d * f64::from(self.intermediate_size),
        }
    }

    /// MLP parameters per layer one token multiplies: `3·d·F` dense; MoE `k·3·d·F_e + d·E`.
    pub fn p_mlp_active(&self) -> f64 {
        let d = f64::from(self.hidden_size);
        match self.moe() {
            Some((e, k, fe)) => f64::from(k) * 3.0 * d * f64::from(fe) + d * f64::from(e),
            None => 3.0 * d * f64::from(self.intermediate_size),
        }
    }

    /// `F_act`: the MLP width one token activates (`F`, or `k·F_e` for MoE), as §4's
    /// activation estimate uses it.
    pub fn f_act(&self) -> f64 {
        match self.moe() {
            Some((_, k, fe)) => f64::from(k) * f64::from(fe),
            None => f64::from(self.intermediate_size),
        }
    }

    /// `V·d`: parameters of one embedding table (input or LM head).
    pub fn embedding_params(&self) -> f64 {
        f64::from(self.vocab_size) * f64::from(self.hidden_size)
    }

    /// `N_lin = L·(P_attn + P_mlp_active)`: parameters every token multiplies, LM head excluded.
    pub fn n_lin(&self) -> f64 {
        f64::from(self.num_hidden_layers) * (self.p_attn() + self.p_mlp_active())
    }

    /// `N_total = L·(P_attn + P_mlp_total) + V·d·(tied ? 1 : 2)`. Norms and biases are ignored.
    pub fn n_total(&self) -> f64 {
        let tables = if self.tie_word_embeddings { 1.0 } else { 2.0 };
        self.layer_params() + self.embedding_params() * tables
    }

    /// Active parameters per token, embedding tables included (informational).
    pub fn n_active(&self) -> f64 {
        let tables = if self.tie_word_embeddings { 1.0 } else { 2.0 };
        self.n_lin() + self.embedding_params() * tables
    }

    /// `L·(P_attn + P_mlp_total)`: all transformer-layer parameters.
    pub fn layer_params(&self) -> f64 {
        f64::from(self.num_hidden_layers) * (self.p_attn() + self.p_mlp_total())
    }

    /// `W_res = N_total·b_w`, whole model (divide by `tp` for one GPU).
    pub fn weights_resident_bytes(&self, dtype: Dtype) -> f64 {
        self.n_total() * dtype.weight_bytes()
    }

    /// Expected distinct experts a step of `tokens` touches per layer:
    /// `E_eff = E·(1 − (1 − k/E)^T)`; `E` for dense models' bookkeeping is irrelevant (returns 0).
    pub fn experts_touched(&self, tokens: u64) -> f64 {
        match self.moe() {
            Some((e, k, _)) => {
                let e = f64::from(e);
                let miss = 1.0 - f64::from(k) / e;
                e * (1.0 - miss.powf(tokens as f64))
            }
            None => 0.0,
        }
    }

    /// `W_step` for a step of `tokens`, whole model: `b_w·(L·(P_attn + P_mlp) + V·d)`, all
    /// weights except the input embedding table (a gather of `T` rows). For MoE the expert
    /// term counts `E_eff` experts instead of `E`; the router is always read.
    pub fn weights_per_step_bytes(&self, dtype: Dtype, tokens: u64) -> f64 {
        dtype.weight_bytes() * (self.layer_params_read(tokens) + self.embedding_params())
    }

    /// Layer parameters a step of `tokens` reads (the MoE-aware part of `W_step`).
    pub(crate) fn layer_params_read(&self, tokens: u64) -> f64 {
        let d = f64::from(self.hidden_size);
        let mlp = match self.moe() {
            Some((e, _, fe)) => {
                self.experts_touched(tokens) * 3.0 * d * f64::from(fe) + d * f64::from(e)
            }
            None => self.p_mlp_total(),
        };
        f64::from(self.num_hidden_layers) * (self.p_attn() + mlp)
    }

    /// Bytes of one embedding table (`V·d·b_w`): what the bandwidth floor "with embeddings" adds.
    pub fn embedding_bytes(&self, dtype: Dtype) -> f64 {
        self.embedding_params() * dtype.weight_bytes()
    }

    /// KV heads one GPU holds under tensor parallelism: `max(1, Hkv / tp)`.
    pub fn kv_heads_per_gpu(&self, tp: u32) -> u32 {
        (self.num_key_value_heads / tp.max(1)).max(1)
    }

    /// `kv_bpt = 2·L·Hkv·hd·b_kv`, whole model.
    pub fn kv_bytes_per_token(&self, kv: KvDtype) -> f64 {
        self.kv_bytes_per_token_per_gpu(kv, 1)
    }

    /// KV bytes per token on one GPU: `2·L·Hkv_gpu·hd·b_kv`, `Hkv_gpu = max(1, Hkv/tp)`.
    pub fn kv_bytes_per_token_per_gpu(&self, kv: KvDtype, tp: u32) -> f64 {
        2.0 * f64::from(self.num_hidden_layers)
            * f64::from(self.kv_heads_per_gpu(tp))
            * f64::from(self.head_dim())
            * kv.bytes()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use crate::{Catalog, Dtype, KvDtype, GIB};

    fn rel(a: f64, b: f64) -> f64 {
        (a - b).abs() / b.abs()
    }

    #[test]
    fn llama_8b_worked_example_quantities() {
        let c = Catalog::builtin();
        let m = c.model("llama-3.1-8b").unwrap();
        assert_eq!(m.head_dim(), 128);
        assert_eq!(m.p_attn(), 41_943_040.0);
        assert_eq!(m.p_mlp_total(), 176_160_768.0);
        assert_eq!(m.p_mlp_active(), 176_160_768.0);
        assert!(rel(m.n_lin(), 6.979e9) < 1e-3);
        assert_eq!(m.n_lin(), 32.0 * (41_943_040.0 + 176_160_768.0));
        assert_eq!(m.embedding_params(), 525_336_576.0);
        assert!(rel(m.n_total(), 8.030e9) < 1e-3);
        let w_res_gib = m.weights_resident_bytes(Dtype::Bf16) / GIB;
        assert!((w_res_gib - 14.96).abs() < 0.005, "{w_res_gib}");
        assert!(rel(m.weights_per_step_bytes(Dtype::Bf16, 1), 15.009e9) < 1e-4);
        // Dense models read the same weights whatever the token count.
        assert_eq!(
            m.weights_per_step_bytes(Dtype::Bf16, 1),
            m.weights_per_step_bytes(Dtype::Bf16, 8192)
        );
        assert_eq!(m.kv_bytes_per_token(KvDtype::Auto), 131_072.0);
        assert_eq!(m.kv_bytes_per_token(KvDtype::Fp8), 65_536.0);
        assert_eq!(m.embedding_bytes(Dtype::Bf16), 2.0 * 525_336_576.0);
    }

    #[test]
    fn catalog_params_and_kv_match_the_model_table() {
        // (id, params column in B, KV per token in KiB at 2 bytes)
        let table = [
            ("llama-3.1-8b", 8.03, 128.0),
            ("llama-3.1-70b", 70.55, 320.0),
            ("qwen3-0.6b", 0.60, 112.0),
            ("qwen2.5-7b", 7.62, 56.0),
            ("mistral-7b", 7.24, 128.0),
            ("qwen3-30b-a3b", 30.5, 96.0),
        ];
        let c = Catalog::builtin();
        assert_eq!(c.models().len(), table.len());
        for (id, params_b, kv_kib) in table {
            let m = c.model(id).unwrap();
            let n = m.n_total() / 1e9;
            // The column is rounded to its last digit (biases and norms are not counted).
            let tol = if params_b < 1.0 {
                0.005
            } else if params_b > 30.0 {
                0.05
            } else {
                0.005
            };
            assert!((n - params_b).abs() <= tol, "{id}: {n} B vs {params_b} B");
            assert_eq!(m.kv_bytes_per_token(KvDtype::Auto) / 1024.0, kv_kib, "{id}");
            assert_eq!(m.head_dim(), 128, "{id}");
        }
        let moe = c.model("qwen3-30b-a3b").unwrap();
        assert!(
            (moe.n_active() / 1e9 - 3.3).abs() < 0.06,
            "{}",
            moe.n_active()
        );
        assert!((moe.weights_resident_bytes(Dtype::Bf16) / GIB - 56.9).abs() < 0.05);
    }

    #[test]
    fn qwen3_head_dim_differs_from_hidden_over_heads() {
        let c = Catalog::builtin();
        let m = c.model("qwen3-0.6b").unwrap();
        assert_eq!(m.hidden_size / m.num_attention_heads, 64);
        assert_eq!(m.head_dim(), 128);
        // q and o are d × H·hd = 1024 × 2048 each.
        assert_eq!(m.p_attn(), 2.0 * 1024.0 * 2048.0 + 2.0 * 1024.0 * 1024.0);
        // Tied: one embedding table.
        assert_eq!(m.n_total(), m.layer_params() + m.embedding_params());
    }

    #[test]
    fn moe_experts_touched_grows_to_all_experts() {
        let c = Catalog::builtin();
        let m = c.model("qwen3-30b-a3b").unwrap();
        let (e, k, fe) = m.moe().unwrap();
        assert_eq!((e, k, fe), (128, 8, 768));
        assert_eq!(m.experts_touched(0), 0.0);
        assert!((m.experts_touched(1) - 8.0).abs() < 1e-9);
        // Strictly increasing and saturating at E.
        let mut last = 0.0;
        for t in [1, 2, 4, 16, 64, 256, 1024] {
            let x = m.experts_touched(t);
            assert!(x > last && x <= 128.0, "{t}: {x}");
            last = x;
        }
        assert!(m.experts_touched(8192) > 127.999);
        // 2 tokens: 128·(1 − (15/16)²) = 15.5 (overlap makes it less than 16).
        assert!((m.experts_touched(2) - 15.5).abs() < 1e-9);
        // W_step: a one-token step reads 8 experts per layer, a large step all 128.
        let expert = 48.0 * 3.0 * 2048.0 * 768.0 * 2.0;
        let w1 = m.weights_per_step_bytes(Dtype::Bf16, 1);
        let wbig = m.weights_per_step_bytes(Dtype::Bf16, 1_000_000);
        assert!(((wbig - w1) - 120.0 * expert).abs() / wbig < 1e-9);
        // At saturation W_step = W_res − one embedding table.
        let full = m.weights_resident_bytes(Dtype::Bf16) - m.embedding_bytes(Dtype::Bf16);
        assert!(rel(wbig, full) < 1e-12);
        // N_lin counts the k active experts and the router.
        assert_eq!(
            m.p_mlp_active(),
            8.0 * 3.0 * 2048.0 * 768.0 + 2048.0 * 128.0
        );
        assert_eq!(m.f_act(), 8.0 * 768.0);
    }

    #[test]
    fn kv_heads_split_by_tensor_parallelism_but_never_below_one() {
        let c = Catalog::builtin();
        let m = c.model("llama-3.1-70b").unwrap();
        assert_eq!(m.kv_heads_per_gpu(1), 8);
        assert_eq!(m.kv_heads_per_gpu(2), 4);
        assert_eq!(m.kv_heads_per_gpu(8), 1);
        // 16-way: KV heads are replicated, each GPU still holds one.
        assert_eq!(m.kv_heads_per_gpu(16), 1);
        assert_eq!(
            m.kv_bytes_per_token_per_gpu(KvDtype::Auto, 2),
            m.kv_bytes_per_token(KvDtype::Auto) / 2.0
        );
        assert_eq!(
            m.kv_bytes_per_token_per_gpu(KvDtype::Auto, 16),
            m.kv_bytes_per_token_per_gpu(KvDtype::Auto, 8)
        );
    }

    #[test]
    fn validation_rejects_bad_shapes() {
        let c = Catalog::builtin();
        let mut m = c.model("llama-3.1-8b").unwrap().clone();
        m.num_key_value_heads = 5;
        assert!(m
            .validate()
            .unwrap_err()
            .to_string()
            .contains("multiple of num_key_value_heads"));
        let mut m = c.model("qwen3-30b-a3b").unwrap().clone();
        m.num_experts_per_tok = Some(200);
        assert!(m
            .validate()
            .unwrap_err()
            .to_string()
            .contains("num_experts_per_tok"));
        let mut m = c.model("llama-3.1-8b").unwrap().clone();
        m.num_hidden_layers = 0;
        assert!(m.validate().is_err());
    }
}
