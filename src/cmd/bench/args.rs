//! The flags of `tiletune bench` and its family subcommands.

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    pub command: BenchCommand,
}

#[derive(Debug, clap::Subcommand)]
pub enum BenchCommand {
    /// Measure this machine's ceilings: memory bandwidth (STREAM copy/triad, and read-only at
    /// the fastest of six software prefetch distances; 1..N threads), the f32 FMA peak per ISA
    /// lane and the int8 peak per int8 lane (1..N threads).
    Roofline(crate::cmd::bench_roofline::Args),
    /// Prefill and decode tokens/s of a model, llama-bench compatible
    /// (pp<N>/tg<N> tests, -p/-n/-t lists, -r repetitions, -o md|json|jsonl).
    Model(crate::cmd::bench_model::Args),
    /// Time f32 GEMV y = W·x (weights f32 or f16); --shape NxK.
    Gemv(KernelArgs),
    /// Time f32 GEMM C = A·Wᵀ (weights f32 or f16); --shape MxNxK.
    Gemm(KernelArgs),
    /// Time quantized GEMV; --shape NxK, --dtype q4_0|q4_1|q5_0|q5_1|q8_0|q4_k|q5_k|q6_k|mxfp4.
    Qgemv(QgemvArgs),
    /// Time an element-wise activation in place; --shape LEN.
    Eltwise(EltwiseArgs),
    /// Time RMSNorm or LayerNorm; --shape ROWSxDIM.
    Norm(NormArgs),
    /// Time row softmax in place; --shape ROWSxDIM.
    Softmax(KernelArgs),
    /// Time RoPE (rotate-half, θ = 10000) in place; --shape ROWSxHEADSxHEAD_DIM.
    Rope(KernelArgs),
    /// Time paged attention; --shape HEADSxKV_HEADSxHEAD_DIMxCTX, --dtype
    /// f32|f16|q8_0 (the KV cache), --rows 1 = decode, more = prefill.
    Attention(AttentionArgs),
    /// Time int8 GEMM (GEMV at M = 1); --shape MxNxK, --dtype i8 (symmetric
    /// activations) or i8_zp (with a zero point).
    I8gemm(KernelArgs),
    /// Time the group-quantized embedding: token lookup (--shape
    /// TOKENSxVOCABxDIM) or the tied LM head GEMV (--lm-head, --shape
    /// VOCABxDIM); --dtype u1..u7.
    Embed(EmbedArgs),
    /// Time the fused projection + RoPE; --shape MxHEADSxHEAD_DIMxK (f32 or f16 weights).
    #[command(alias = "matmul_rope")]
    MatmulRope(KernelArgs),
}

/// What every kernel family's bench takes.
#[derive(Debug, Clone, clap::Args)]
pub struct KernelArgs {
    /// Problem size, e.g. 4864x896 (see the family's help for the order).
    #[arg(long)]
    pub shape: String,
    /// Element type [default: f32; q4_0 for qgemv, i8 for i8gemm, u4 for embed].
    #[arg(long, value_parser = crate::cmd::parse_dtype)]
    pub dtype: Option<String>,
    /// Force an ISA variant (scalar, avx2, avx_vnni, avx512, avx512_vnni,
    /// amx, neon, neon_dotprod, neon_i8mm, sme) [default: the best available].
    #[arg(long)]
    pub isa: Option<String>,
    /// The family's parameters as JSON, e.g. '{"rows_per_block":2}'
    /// [default: the family's analytic default].
    #[arg(long)]
    pub params: Option<String>,
    /// Worker threads [default: all cores for the matrix families, the
    /// family's rule for the others].
    #[arg(long, short = 't', value_parser = crate::cmd::parse_threads)]
    pub threads: Option<usize>,
    /// Rotate input copies through more memory than the last-level cache.
    #[arg(long)]
    pub cold: bool,
    /// Counters read around the timed region.
    #[arg(long, default_value = "auto", value_name = "armv8|x86|software|auto")]
    pub counters: String,
    /// Pin the measuring thread to these CPUs, comma separated, and each
    /// pool worker to one of them (round robin).
    #[arg(long, value_delimiter = ',')]
    pub pin: Vec<usize>,
    /// Thread placement instead of --threads/--pin: t4@cluster2 (4 workers
    /// on cluster 2 as `tiletune probe` numbers them), t3@cluster1+2, or t8
    /// (not pinned).
    #[arg(long, conflicts_with_all = ["threads", "pin"])]
    pub placement: Option<String>,
    /// Seed for the random inputs.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Short schedule: a smoke test, not a measurement.
    #[arg(long)]
    pub quick: bool,
    /// Selector table holding the roofline ceilings [default: $TILETUNE_DB,
    /// else the XDG data directory].
    #[arg(long, value_name = "PATH")]
    pub db: Option<std::path::PathBuf>,
}

#[derive(Debug, clap::Args)]
pub struct QgemvArgs {
    #[command(flatten)]
    pub common: KernelArgs,
    /// Activations: a32 (f32) or a8 (quantized to Q8 blocks).
    #[arg(long, default_value = "a32")]
    pub mode: String,
}

#[derive(Debug, clap::Args)]
pub struct EltwiseArgs {
    #[command(flatten)]
    pub common: KernelArgs,
    /// silu, gelu_tanh, gelu_erf, quick_gelu, relu, relu2 or sigmoid.
    #[arg(long)]
    pub op: String,
}

#[derive(Debug, clap::Args)]
pub struct NormArgs {
    #[command(flatten)]
    pub common: KernelArgs,
    /// rms or layer.
    #[arg(long, default_value = "rms")]
    pub kind: String,
}

#[derive(Debug, clap::Args)]
pub struct AttentionArgs {
    #[command(flatten)]
    pub common: KernelArgs,
    /// Query rows: 1 is a decode step; more is a prefill chunk (the last
    /// ROWS positions of the context).
    #[arg(long, default_value_t = 1)]
    pub rows: usize,
    /// Tokens per KV page, a multiple of 4 for q8_0 [default: the kernel's rule for
    /// the head size and dtype].
    #[arg(long)]
    pub page_size: Option<usize>,
}

#[derive(Debug, clap::Args)]
pub struct EmbedArgs {
    #[command(flatten)]
    pub common: KernelArgs,
    /// Time the tied LM head (logits = W·x) instead of the token lookup.
    #[arg(long)]
    pub lm_head: bool,
    /// Values per quantization group: 32, 64 or 128 [default: 32].
    #[arg(long)]
    pub group: Option<usize>,
}
