//! Model descriptions and the quantities of SIMULATOR.md §3.1.

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
