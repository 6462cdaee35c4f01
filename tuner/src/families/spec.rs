//! What one op is to the tuner and to `tiletune bench`: an [`OpSpec`]
//! (name, dims, dtypes, roofline, how to build its problems), the machine a
//! problem is built for, and the request a pinned configuration is built
//! from. Each family file holds the `OpSpec`s of its ops; `families.rs`
//! only lists the families.

use crate::TunerError;
use crate::campaign::KernelProblem;
use serde::de::DeserializeOwned;
use tiletune_kernels::{CpuCaps, Isa, KernelError, Tunable};
use tiletune_tables::Problem;

/// How a problem's op name is matched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpName {
    /// Exactly this name (`gemv`).
    Exact(&'static str),
    /// This prefix and any suffix (`eltwise_` + an element-wise op name);
    /// the family checks the suffix.
    Prefix(&'static str),
}

impl OpName {
    /// Whether `op` names this op.
    pub fn matches(&self, op: &str) -> bool {
        match *self {
            OpName::Exact(name) => op == name,
            OpName::Prefix(prefix) => op.starts_with(prefix),
        }
    }
}

/// Builds a problem of an op on a machine.
pub type TuneFn = fn(&Problem, &Machine) -> Result<Box<dyn KernelProblem>, TunerError>;
/// Builds the one-candidate problem of a [`PinRequest`].
pub type PinFn = fn(&PinRequest) -> Result<Box<dyn KernelProblem>, TunerError>;
/// The elements of one copy of a problem's operands (inputs, output), from
/// its dims: what building it allocates as f32 before it quantizes, packs
/// or copies them. In `u128`, so that no product of dims overflows.
pub type OperandsFn = fn(&Dims) -> u128;

/// A problem's dims as an [`OperandsFn`] reads them.
pub struct Dims<'a>(&'a Problem);

impl Dims<'_> {
    /// The dim `name`; 1 where the problem leaves an optional dim out.
    pub fn get(&self, name: &str) -> u128 {
        self.0.dim(name).unwrap_or(1) as u128
    }

    /// Σ over `terms` of the product of each term's dims (saturating).
    pub fn terms(&self, terms: &[&[&str]]) -> u128 {
        terms.iter().fold(0u128, |sum, t| {
            let p = t.iter().fold(1u128, |p, n| p.saturating_mul(self.get(n)));
            sum.saturating_add(p)
        })
    }
}

/// The tuned search space of an op (`tiletune tune`).
#[derive(Debug, Clone, Copy)]
pub struct Tune {
    /// The dtypes the op can be tuned for.
    pub dtypes: &'static [&'static str],
    /// Builds the problem: inputs, reference and every candidate, the
    /// analytic default at [`KernelProblem::default_index`].
    pub build: TuneFn,
}

/// One op as the tuner and `tiletune bench` know it.
#[derive(Debug, Clone, Copy)]
pub struct OpSpec {
    /// The op name of its problems ([`Problem::op`]).
    pub name: OpName,
    /// The `--shape` dims, in order.
    pub dims: &'static [&'static str],
    /// Dims set by flags rather than `--shape`, each optional (e.g. the
    /// attention's `rows` and `page`).
    pub optional_dims: &'static [&'static str],
    /// The dtypes a pinned configuration accepts.
    pub dtypes: &'static [&'static str],
    /// Limited by memory bandwidth (its roofline is the STREAM triad)
    /// rather than by FMA throughput.
    pub bandwidth_bound: bool,
    /// Multiplies int8 operands whatever its variant (the activations are
    /// quantized by the op itself), so its work counts int8 operations.
    pub int8: bool,
    /// Its work counts f32 operations whatever its variant, even on an
    /// int8 dot-product ISA (where only a part of it is int8).
    pub float: bool,
    /// The kernel's own op name, for kernel errors.
    pub kernel: &'static str,
    /// The tuned search space; `None` where the tuner does not search the
    /// op yet.
    pub tune: Option<Tune>,
    /// One pinned configuration, for `tiletune bench`.
    pub pin: PinFn,
    /// Its operands' size, checked against the memory available before
    /// anything is allocated.
    pub operands: OperandsFn,
}

impl OpSpec {
    /// An op `tiletune bench` pins and the tuner does not search, bandwidth
    /// bound, without optional dims; the methods below change that.
    pub const fn new(
        name: OpName,
        dims: &'static [&'static str],
        dtypes: &'static [&'static str],
        kernel: &'static str,
        pin: PinFn,
        operands: OperandsFn,
    ) -> OpSpec {
        OpSpec {
            name,
            dims,
            optional_dims: &[],
            dtypes,
            bandwidth_bound: true,
            int8: false,
            float: false,
            kernel,
            tune: None,
            pin,
            operands,
        }
    }

    /// Also takes these dims from flags.
    pub const fn optional_dims(self, optional_dims: &'static [&'static str]) -> OpSpec {
        OpSpec {
            optional_dims,
            ..self
        }
    }

    /// Limited by FMA throughput rather than by memory bandwidth.
    pub const fn fma_bound(self) -> OpSpec {
        OpSpec {
            bandwidth_bound: false,
            ..self
        }
    }

    /// Its work is int8 multiply-adds whatever its variant.
    pub const fn int8(self) -> OpSpec {
        OpSpec { int8: true, ..self }
    }

    /// Its work is f32 whatever its variant.
    pub const fn float(self) -> OpSpec {
        OpSpec {
            float: true,
            ..self
        }
    }

    /// The tuner searches it for `dtypes`.
    pub const fn tuned(self, dtypes: &'static [&'static str], build: TuneFn) -> OpSpec {
        OpSpec {
            tune: Some(Tune { dtypes, build }),
            ..self
        }
    }
}

/// What the tuner needs to know about the machine to build a problem.
#[derive(Debug, Clone, Copy)]
pub struct Machine {
    pub caps: CpuCaps,
    /// Thread counts to search (e.g. `[1, 2]`, or one cluster's sizes).
    pub max_threads: usize,
    /// Seed for the random inputs.
    pub seed: u64,
    /// Bytes a problem's buffers may take ([`tiletune_soc::mem_available`]);
    /// `None` where the system does not say, and then only the per-operand
    /// limit of [`crate::suite::MAX_OPERAND_ELEMENTS`] applies.
    pub memory: Option<u64>,
    /// Bytes the workload reads between two calls of one weight's kernel,
    /// when tuning for a model: its decode weights
    /// (`tiletune_runtime::problems::decode_weight_bytes`). `None`: the
    /// caches alone size a cold rotation ([`Machine::cold_bytes`]).
    pub streamed: Option<u64>,
}

impl Machine {
    /// Bytes a cold-cache rotation reads through before a copy comes round
    /// again: twice the last-level cache of every core, or what the model
    /// reads between two calls of one weight where that is less.
    ///
    /// Every core's LLC: a VM reports one LLC, but its vCPUs may sit on
    /// different L3 slices (a Zen CCD each), and a 2-thread run rotating
    /// through 2× one slice is partly served from the two slices together,
    /// faster than memory (docs/PERF.md). No small fixed cap: a small decode
    /// GEMV (SmolLM2's 192×576 Q4_1, 69 KB) capped at 64 copies rotates
    /// through 4.4 MB, inside the LLC, where one thread beats two by 3×;
    /// the model streams every weight from DRAM, where that one-thread pick
    /// makes decode ~8% slower (docs/PERF.md).
    ///
    /// The model's own bytes are the cap because they are what makes its
    /// weights cold: between two calls of one weight, decode reads every
    /// other weight once. A rotation as large as the model leaves a weight
    /// as cold as the model does, whatever the caches; a larger one only
    /// costs time and memory: a server VM may report its host's whole L3
    /// (480 MiB on the Xeon in docs/PERF.md), twice which for each of two
    /// cores is 1.9 GB per decode problem of a 346 MB model.
    pub fn cold_bytes(&self) -> usize {
        let caches = 2 * self.caps.l3.max(self.caps.l2) * self.caps.cores.max(1);
        match self.streamed.and_then(|s| usize::try_from(s).ok()) {
            Some(s) if s > 0 => caches.min(s),
            _ => caches,
        }
    }

    /// A 2-core machine with a 1 MiB LLC, for tests: its cold-cache
    /// rotations stay small.
    #[doc(hidden)]
    pub fn small_for_tests(seed: u64) -> Machine {
        Machine {
            caps: CpuCaps {
                l1d: 32 << 10,
                l2: 256 << 10,
                l3: 1 << 20,
                cores: 2,
            },
            max_threads: 2,
            seed,
            memory: None,
            streamed: None,
        }
    }

    /// Refuses `spec` when building it would take more memory than this
    /// machine has available: the f32 operands, the f64-accumulated
    /// reference and the packed or quantized copy (three copies of the
    /// operands, rounded up), plus the cold-cache copies, which together
    /// read through about [`Machine::cold_bytes`]. An estimate that errs
    /// high, so that a refused problem would not have fitted.
    pub fn check_fits(&self, op: &OpSpec, spec: &Problem) -> Result<(), TunerError> {
        let Some(available) = self.memory else {
            return Ok(());
        };
        let need = (op.operands)(&Dims(spec)).saturating_mul(4 * 3) + self.cold_bytes() as u128;
        if need > available as u128 {
            return Err(TunerError::OutOfMemory {
                problem: spec.to_string(),
                need: u64::try_from(need).unwrap_or(u64::MAX),
                available,
            });
        }
        Ok(())
    }
}

/// The configuration `tiletune bench` pins; `None` fields take the
/// family's defaults (best ISA, `Tunable::default_for`, its thread rule).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct OneConfig {
    pub isa: Option<Isa>,
    /// The family's params struct as JSON (e.g. `{"rows_per_block":2}`).
    pub params: Option<serde_json::Value>,
    /// Overrides the thread count (also one given in `params`).
    pub threads: Option<usize>,
    /// Rotate input copies through more memory than the LLC holds.
    pub cold: bool,
}

/// A pinned configuration to build: the problem, its [`OpSpec`], its dims
/// in the spec's order (present and positive), the machine and the
/// configuration (an available ISA, at least one thread: both checked).
pub struct PinRequest<'a> {
    pub spec: &'a Problem,
    pub op: &'static OpSpec,
    pub dims: Vec<usize>,
    pub machine: &'a Machine,
    pub config: &'a OneConfig,
}

impl PinRequest<'_> {
    /// The forced thread count, else `default`; at least 1.
    pub fn threads(&self, default: usize) -> usize {
        self.config.threads.unwrap_or(default).max(1)
    }

    /// `--params` parsed as `P` and validated, else `default()`.
    pub fn params_or<P: Tunable + DeserializeOwned>(
        &self,
        default: impl FnOnce() -> P,
    ) -> Result<P, TunerError> {
        let Some(v) = &self.config.params else {
            return Ok(default());
        };
        let p: P = serde_json::from_value(v.clone()).map_err(|e| KernelError::InvalidParams {
            op: self.op.kernel,
            reason: format!("params {v} do not parse: {e}"),
        })?;
        p.validate()?;
        Ok(p)
    }

    /// A shape the kernel cannot take, with what to do instead.
    pub fn bad_shape(&self, reason: String) -> TunerError {
        KernelError::InvalidShape {
            op: self.op.kernel,
            reason,
        }
        .into()
    }

    /// The dtype is not one of the op's.
    pub fn unsupported_dtype(&self) -> TunerError {
        TunerError::UnsupportedDtype {
            op: self.spec.op().to_string(),
            dtype: self.spec.dtype().to_string(),
            supported: self.op.dtypes.join(", "),
        }
    }
}
