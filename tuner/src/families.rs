//! Kernel families as the tuner and `tiletune bench` see them: one
//! [`OpSpec`] per op (its name, dims, dtypes, roofline, and how to build its
//! problems), each held by its family's file under `families/`; this file
//! lists the families and answers every question about an op from its
//! description.
//!
//! A tuned problem ([`instantiate`]) is a [`KernelProblem`] with seeded
//! random inputs, the scalar reference's output and the search space (ISA
//! variants × the family's parameter candidates × thread counts, the
//! analytic default first). A pinned problem ([`instantiate_one`], for
//! `tiletune bench`) has exactly one candidate: a forced ISA, parameters
//! from JSON, a thread count; every family has one, including the ones the
//! tuner does not search yet.

mod attention;
mod common;
mod embed;
mod gemm;
mod gemv;
mod i8gemm;
mod lm_head;
mod matmul_rope;
mod pinned;
mod qgemm;
mod qgemv;
pub mod quant;
mod rows;
mod spec;

pub use common::{WeightElem, worker_tids};
pub use spec::{
    Dims, Machine, OneConfig, OpName, OpSpec, OperandsFn, PinFn, PinRequest, Tune, TuneFn,
};

use crate::TunerError;
use crate::campaign::KernelProblem;
use tiletune_bench::roofline::Arithmetic;
use tiletune_kernels::KernelError;
use tiletune_tables::Problem;

/// Every family's ops: the one table the lookups below read. A new op goes
/// in its family's `OPS`; a new family adds its file and a line here.
const FAMILIES: &[&[OpSpec]] = &[
    gemv::OPS,
    gemm::OPS,
    qgemv::OPS,
    rows::OPS,
    attention::OPS,
    i8gemm::OPS,
    embed::OPS,
    lm_head::OPS,
    matmul_rope::OPS,
];

/// Every op's description.
pub fn ops() -> impl Iterator<Item = &'static OpSpec> {
    FAMILIES.iter().flat_map(|f| f.iter())
}

/// The description of `op`, if it is one.
pub fn op_spec(op: &str) -> Option<&'static OpSpec> {
    ops().find(|s| s.name.matches(op))
}

/// `op` is none of `ops()` (or of the tuned ones, when `tuned`): the error
/// lists those there are.
fn unknown_op(op: &str, tuned: bool) -> TunerError {
    let known: Vec<String> = ops()
        .filter(|s| !tuned || s.tune.is_some())
        .map(|s| match s.name {
            OpName::Exact(n) => n.to_string(),
            OpName::Prefix(p) => format!("{p}<op>"),
        })
        .collect();
    TunerError::UnknownOp {
        op: op.to_string(),
        known: known.join(", "),
    }
}

/// The dtypes each op can be tuned for (none for ops the tuner does not
/// search).
pub fn supported_dtypes(op: &str) -> &'static [&'static str] {
    op_spec(op)
        .and_then(|s| s.tune.as_ref())
        .map_or(&[], |t| t.dtypes)
}

/// Every op [`instantiate_one`] knows, with its shape's dimension names.
pub fn bench_dims(op: &str) -> Option<&'static [&'static str]> {
    op_spec(op).map(|s| s.dims)
}

/// Dims of `op` set by flags rather than `--shape` (e.g. the attention's
/// `rows` and `page`), each optional.
pub fn bench_optional_dims(op: &str) -> &'static [&'static str] {
    op_spec(op).map_or(&[], |s| s.optional_dims)
}

/// The dtypes [`instantiate_one`] accepts for `op`.
pub fn bench_dtypes(op: &str) -> &'static [&'static str] {
    op_spec(op).map_or(&[], |s| s.dtypes)
}

/// Whether `op` is limited by memory bandwidth (its roofline is the STREAM
/// triad) rather than by FMA throughput (GEMM); an unknown op counts as
/// bandwidth bound.
pub fn bandwidth_bound(op: &str) -> bool {
    op_spec(op).is_none_or(|s| s.bandwidth_bound)
}

/// What `op`'s work is in one `variant`, which decides the unit its rate is
/// counted in and its compute roof: int8 for the ops that quantize their
/// activations themselves, f32 for those whose work is mostly f32 on every
/// ISA (attention), else as the variant and dtype say
/// ([`Arithmetic::of_kernel`]).
pub fn arithmetic(op: &str, dtype: &str, variant: &str) -> Arithmetic {
    let spec = op_spec(op);
    if spec.is_some_and(|s| s.int8) {
        Arithmetic::Int8
    } else if spec.is_some_and(|s| s.float) {
        Arithmetic::F32
    } else {
        Arithmetic::of_kernel(dtype, variant)
    }
}

/// Parses `--op OP --dtype DT --shape AxB[xC]` of `tiletune tune` into a
/// problem of an op the tuner searches, naming the dims in the op's order.
pub fn parse_tune_problem(op: &str, dtype: &str, shape: &str) -> Result<Problem, TunerError> {
    let spec = op_spec(op)
        .filter(|s| s.tune.is_some())
        .ok_or_else(|| unknown_op(op, true))?;
    let dims = crate::suite::parse_dims(op, spec.dims, shape)?;
    Ok(Problem::new(op, dtype, dims)?)
}

/// Parses `AxB[xC]` into a problem for a [`bench_dims`] op; zero sizes are
/// refused.
pub fn parse_bench_problem(op: &str, dtype: &str, shape: &str) -> Result<Problem, TunerError> {
    parse_bench_problem_with(op, dtype, shape, &[])
}

/// [`parse_bench_problem`] plus the [`bench_optional_dims`] given by flags
/// (e.g. `[("rows", 1), ("page", 16)]`); a dim the op does not take, or a
/// zero, is refused.
pub fn parse_bench_problem_with(
    op: &str,
    dtype: &str,
    shape: &str,
    extra: &[(&str, usize)],
) -> Result<Problem, TunerError> {
    let spec = op_spec(op).ok_or_else(|| unknown_op(op, false))?;
    let (names, optional) = (spec.dims, spec.optional_dims);
    let mut dims = crate::suite::parse_dims(op, names, shape)?;
    for &(name, v) in extra {
        if !optional.contains(&name) || v == 0 {
            return Err(TunerError::BadShape {
                op: op.to_string(),
                shape: format!("{name}={v}"),
                expected: format!("{} and optionally {}", names.join("x"), optional.join(", ")),
            });
        }
        dims.push((name, v));
    }
    Ok(Problem::new(op, dtype, dims)?)
}

/// Builds the tuned problem for `spec` on this machine.
pub fn instantiate(spec: &Problem, m: &Machine) -> Result<Box<dyn KernelProblem>, TunerError> {
    let unknown = || unknown_op(spec.op(), true);
    let op = op_spec(spec.op()).ok_or_else(unknown)?;
    let tune = op.tune.as_ref().ok_or_else(unknown)?;
    if !tune.dtypes.contains(&spec.dtype()) {
        return Err(TunerError::UnsupportedDtype {
            op: spec.op().to_string(),
            dtype: spec.dtype().to_string(),
            supported: tune.dtypes.join(", "),
        });
    }
    m.check_fits(op, spec)?;
    (tune.build)(spec, m)
}

/// Builds the one-candidate problem of `spec` under `one`.
pub fn instantiate_one(
    spec: &Problem,
    m: &Machine,
    one: &OneConfig,
) -> Result<Box<dyn KernelProblem>, TunerError> {
    let op_name = spec.op();
    let op = op_spec(op_name).ok_or_else(|| unknown_op(op_name, false))?;
    if !op.dtypes.contains(&spec.dtype()) {
        return Err(TunerError::UnsupportedDtype {
            op: op_name.to_string(),
            dtype: spec.dtype().to_string(),
            supported: op.dtypes.join(", "),
        });
    }
    let dims: Vec<usize> = op
        .dims
        .iter()
        .map(|n| {
            spec.dim(n).ok_or_else(|| TunerError::BadShape {
                op: op_name.to_string(),
                shape: spec.to_string(),
                expected: op.dims.join("x"),
            })
        })
        .collect::<Result<_, _>>()?;
    if let Some(isa) = one.isa
        && !isa.is_available()
    {
        return Err(KernelError::IsaUnavailable { op: op.kernel, isa }.into());
    }
    if one.threads == Some(0) {
        return Err(KernelError::InvalidParams {
            op: op.kernel,
            reason: "threads must be at least 1".into(),
        }
        .into());
    }
    m.check_fits(op, spec)?;
    (op.pin)(&PinRequest {
        spec,
        op,
        dims,
        machine: m,
        config: one,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use common::candidate_of;
    use tiletune_kernels::Isa;
    use tiletune_kernels::choice::{KernelChoice, Op, WeightKind};

    fn one(spec: &Problem, cfg: &OneConfig) -> Box<dyn KernelProblem> {
        instantiate_one(spec, &Machine::small_for_tests(3), cfg)
            .unwrap_or_else(|e| panic!("{spec}: {e}"))
    }

    fn build(
        op: &str,
        dtype: &str,
        shape: &str,
        extra: &[(&str, usize)],
        cfg: &OneConfig,
    ) -> Result<Box<dyn KernelProblem>, String> {
        let spec = parse_bench_problem_with(op, dtype, shape, extra).map_err(|e| e.to_string())?;
        instantiate_one(&spec, &Machine::small_for_tests(5), cfg).map_err(|e| e.to_string())
    }

    /// An op that quantizes its activations counts int8 work in every
    /// variant; the others as their variant and dtype say.
    #[test]
    fn arithmetic_follows_the_op_then_the_variant() {
        use Arithmetic::*;
        assert_eq!(arithmetic("qgemv_a8", "q4_k", "avx2"), Int8);
        assert_eq!(arithmetic("qgemv_a8", "q4_0", "scalar"), Int8);
        assert_eq!(arithmetic("qgemv_a32", "q4_0", "avx2"), F32);
        assert_eq!(arithmetic("i8gemm", "i8", "scalar"), Int8);
        assert_eq!(arithmetic("gemm", "q4_0", "avx2.qgemm"), Int8);
        assert_eq!(arithmetic("gemm", "f32", "avx2"), F32);
        assert_eq!(arithmetic("no_such_op", "f32", "scalar"), F32);
    }

    /// No two descriptions claim one op name, and every op's dims parse
    /// back into a problem of that op.
    #[test]
    fn every_op_has_one_description() {
        let all: Vec<&OpSpec> = ops().collect();
        for (i, a) in all.iter().enumerate() {
            let name = match a.name {
                OpName::Exact(n) => n.to_string(),
                OpName::Prefix(p) => format!("{p}silu"),
            };
            for b in &all[i + 1..] {
                assert!(!b.name.matches(&name), "{name} is described twice");
            }
            // By name and kernel, not by address: each use of a `const`
            // table may be its own copy.
            let found = op_spec(&name).unwrap();
            assert_eq!((found.name, found.kernel), (a.name, a.kernel), "{name}");
            let shape = vec!["2"; a.dims.len()].join("x");
            let p = parse_bench_problem(&name, a.dtypes[0], &shape).unwrap();
            assert_eq!(p.op(), name);
        }
    }

    /// Every op refuses a problem whose buffers would not fit in the memory
    /// available, before it allocates them (4096 per dim, 2·10⁹ for an op
    /// of one dim, needs at least 400 MB on every op), and builds a small
    /// one on the same machine; tuned ops are checked the same way.
    #[test]
    fn problems_that_do_not_fit_in_memory_are_refused_before_they_are_built() {
        let small = Machine {
            memory: Some(64 << 20),
            ..Machine::small_for_tests(5)
        };
        for op in ops() {
            let name = match op.name {
                OpName::Exact(n) => n.to_string(),
                OpName::Prefix(p) => format!("{p}silu"),
            };
            let dtype = op.dtypes[0];
            let huge = match op.dims.len() {
                1 => "2000000000".to_string(),
                n => vec!["4096"; n].join("x"),
            };
            let spec = parse_bench_problem(&name, dtype, &huge).unwrap();
            let err = instantiate_one(&spec, &small, &OneConfig::default())
                .err()
                .unwrap_or_else(|| panic!("{spec} was built in 64 MiB"));
            assert!(
                matches!(err, TunerError::OutOfMemory { available, .. } if available == 64 << 20),
                "{spec}: {err}"
            );
            let msg = err.to_string();
            assert!(msg.contains("64 MiB of memory is available"), "{msg}");
            if let Some(t) = op.tune {
                let spec = parse_bench_problem(&name, t.dtypes[0], &huge).unwrap();
                assert!(matches!(
                    instantiate(&spec, &small).err(),
                    Some(TunerError::OutOfMemory { .. })
                ));
            }
            let fits = if name == "attention" {
                "4x2x64x64".to_string()
            } else {
                vec!["64"; op.dims.len()].join("x")
            };
            let spec = parse_bench_problem(&name, dtype, &fits).unwrap();
            instantiate_one(&spec, &small, &OneConfig::default())
                .unwrap_or_else(|e| panic!("{spec}: {e}"));
        }
    }

    /// The tuner's default candidate is the runtime's default plan entry:
    /// both come from `KernelChoice::default_for`, so a tuned speed-up is
    /// measured against what actually runs without a table.
    #[test]
    fn the_default_candidate_is_the_runtimes_default_choice() {
        let mach = Machine::small_for_tests(3);
        for (op, dtype, m, n, k) in [
            ("gemv", "q4_0", 1, 64, 256),
            ("gemm", "q4_0", 64, 64, 256),
            ("gemv", "q6_k", 1, 32, 256),
            ("gemm", "q8_0", 16, 48, 64),
            ("gemv", "f32", 1, 64, 32),
            ("gemm", "f32", 16, 64, 32),
        ] {
            let spec = if op == "gemv" {
                Problem::new(op, dtype, [("n", n), ("k", k)]).unwrap()
            } else {
                Problem::new(op, dtype, [("m", m), ("n", n), ("k", k)]).unwrap()
            };
            let p = instantiate(&spec, &mach).unwrap();
            let want = KernelChoice::default_for(
                Op::from_name(op).unwrap(),
                WeightKind::of_dtype(dtype),
                m,
                n,
                k,
                &mach.caps,
                mach.max_threads,
                None,
            );
            assert_eq!(
                p.candidates()[p.default_index()],
                candidate_of(&want),
                "{spec}"
            );
        }
    }

    fn machine() -> Machine {
        Machine::small_for_tests(7)
    }

    /// A problem's operands are made again, identically, after `release`:
    /// the same validation errors before and after.
    #[test]
    fn released_problems_make_the_same_operands_again() {
        for spec in [
            Problem::new("gemv", "q4_1", [("n", 9), ("k", 64)]).unwrap(),
            Problem::new("gemm", "q4_k", [("m", 3), ("n", 5), ("k", 256)]).unwrap(),
            Problem::new("gemv", "f32", [("n", 7), ("k", 33)]).unwrap(),
            Problem::new("gemm", "f16", [("m", 3), ("n", 9), ("k", 17)]).unwrap(),
            Problem::new("gemm", "f32", [("m", 201), ("n", 389), ("k", 23)]).unwrap(),
        ] {
            let mut p = instantiate(&spec, &machine()).unwrap();
            p.prepare();
            let before: Vec<f32> = (0..p.candidates().len())
                .map(|i| p.validate(i).unwrap())
                .collect();
            p.run(0);
            p.release();
            let after: Vec<f32> = (0..p.candidates().len())
                .map(|i| p.validate(i).unwrap())
                .collect();
            assert_eq!(before, after, "{spec}");
        }
    }

    #[test]
    fn every_offered_candidate_validates() {
        for spec in [
            Problem::new("gemv", "q4_0", [("n", 9), ("k", 64)]).unwrap(),
            Problem::new("gemv", "q4_k", [("n", 3), ("k", 256)]).unwrap(),
            Problem::new("gemv", "mxfp4", [("n", 5), ("k", 96)]).unwrap(),
            Problem::new("gemv", "f32", [("n", 37), ("k", 70)]).unwrap(),
            Problem::new("gemv", "f16", [("n", 16), ("k", 33)]).unwrap(),
            Problem::new("gemm", "f32", [("m", 5), ("n", 19), ("k", 23)]).unwrap(),
            Problem::new("gemm", "f16", [("m", 3), ("n", 9), ("k", 17)]).unwrap(),
            Problem::new("gemm", "f32", [("m", 201), ("n", 389), ("k", 23)]).unwrap(),
            Problem::new("gemm", "q4_1", [("m", 5), ("n", 19), ("k", 64)]).unwrap(),
            Problem::new("gemm", "q5_0", [("m", 17), ("n", 9), ("k", 96)]).unwrap(),
            Problem::new("gemm", "q6_k", [("m", 3), ("n", 4), ("k", 256)]).unwrap(),
            Problem::new("gemm", "q4_k", [("m", 2), ("n", 9), ("k", 512)]).unwrap(),
            Problem::new("gemm", "q5_1", [("m", 5), ("n", 7), ("k", 64)]).unwrap(),
            Problem::new("gemm", "mxfp4", [("m", 3), ("n", 5), ("k", 96)]).unwrap(),
            // Checked on a sample of C (the K-quant on its own GEMM
            // definition), with tail tiles at both ends of the sample.
            Problem::new("gemm", "q4_0", [("m", 197), ("n", 389), ("k", 64)]).unwrap(),
            Problem::new("gemm", "q4_k", [("m", 193), ("n", 387), ("k", 256)]).unwrap(),
        ] {
            let mut p = instantiate(&spec, &machine()).unwrap();
            assert!(!p.candidates().is_empty());
            let tol = p.tolerance();
            for i in 0..p.candidates().len() {
                let err = p.validate(i).unwrap();
                assert!(err <= tol, "{spec}: {:?}: err {err}", p.candidates()[i]);
            }
        }
    }

    #[test]
    fn tune_shapes_too_large_to_allocate_are_refused() {
        for shape in ["18446744073709551615x2", "99999999x99999999", "65536x65537"] {
            let e = parse_tune_problem("gemv", "f32", shape).unwrap_err();
            assert!(matches!(e, TunerError::TooLarge { .. }), "{shape}: {e}");
        }
        let e = parse_tune_problem("gemm", "f32", "100000x100000x100000").unwrap_err();
        assert!(e.to_string().contains("too large for gemm"), "{e}");
        // The largest real shapes still parse: a 7B LM head, its prefill.
        assert!(parse_tune_problem("gemv", "q8_0", "152064x3584").is_ok());
        assert!(parse_tune_problem("gemm", "q8_0", "256x152064x3584").is_ok());
    }

    #[test]
    fn tune_problems_name_dims_in_order() {
        let p = parse_tune_problem("gemv", "q4_0", "4864x896").unwrap();
        assert_eq!(p.dim("n"), Some(4864));
        assert_eq!(p.dim("k"), Some(896));
        assert_eq!(p.to_string(), "gemv/q4_0/n=4864,k=896");
        let g = parse_tune_problem("gemm", "f32", "16x896x896").unwrap();
        assert_eq!(g.dim("m"), Some(16));
        let i = parse_tune_problem("i8gemm", "i8", "64x32x96").unwrap();
        assert_eq!(
            (i.dim("m"), i.dim("n"), i.dim("k")),
            (Some(64), Some(32), Some(96))
        );
    }

    #[test]
    fn tune_problems_reject_bad_input() {
        // An op `bench` pins but the tuner does not search is no tune op.
        for op in ["conv", "softmax"] {
            let e = parse_tune_problem(op, "f32", "1x2").unwrap_err();
            assert!(matches!(e, TunerError::UnknownOp { .. }), "{e}");
            assert!(e.to_string().contains("gemv, gemm, i8gemm"), "{e}");
        }
        for bad in ["4864", "4864x", "ax896", "0x896", "1x2x3"] {
            assert!(parse_tune_problem("gemv", "f32", bad).is_err(), "{bad}");
        }
    }

    /// SME runs only where tuned: on a CPU with it (qemu `max`) the tuned
    /// f32/f16 GEMM and int8 GEMM offer every SME kernel shape at every
    /// thread count, each validates against the reference, and the default
    /// candidate stays the variant that runs untuned; elsewhere no SME
    /// candidate is offered.
    #[test]
    fn sme_candidates_are_offered_where_the_cpu_has_sme() {
        let here = tiletune_kernels::sme::shapes();
        for spec in [
            Problem::new("gemm", "f32", [("m", 20), ("n", 33), ("k", 40)]).unwrap(),
            Problem::new("gemm", "f16", [("m", 3), ("n", 9), ("k", 17)]).unwrap(),
            Problem::new("gemm", "f32", [("m", 201), ("n", 389), ("k", 23)]).unwrap(),
            Problem::new("i8gemm", "i8", [("m", 1), ("n", 40), ("k", 70)]).unwrap(),
            Problem::new("i8gemm", "i8_zp", [("m", 19), ("n", 9), ("k", 33)]).unwrap(),
        ] {
            let mut p = instantiate(&spec, &machine()).unwrap();
            let sme: Vec<usize> = (0..p.candidates().len())
                .filter(|&i| p.candidates()[i].variant() == Isa::Sme.name())
                .collect();
            assert_eq!(!sme.is_empty(), Isa::Sme.is_available(), "{spec}");
            let default = &p.candidates()[p.default_index()];
            assert_ne!(default.variant(), Isa::Sme.name(), "{spec}");
            let mut offered = Vec::new();
            for i in sme {
                let c = p.candidates()[i].clone();
                let shape = (c.params()["mr"].as_u64(), c.params()["nr"].as_u64());
                let shape = (shape.0.unwrap() as usize, shape.1.unwrap() as usize);
                if !offered.contains(&(shape, c.threads())) {
                    offered.push((shape, c.threads()));
                }
                let err = p
                    .validate(i)
                    .unwrap_or_else(|e| panic!("{spec} {c:?}: {e}"));
                assert!(err <= p.tolerance(), "{spec} {c:?}: error {err}");
            }
            let threads = machine().max_threads;
            assert_eq!(offered.len(), here.len() * threads, "{spec}: {offered:?}");
        }
    }

    #[test]
    fn quantized_decode_searches_the_gemm_where_it_exists_else_both_activation_modes() {
        for dtype in [
            "q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q4_k", "q5_k", "q6_k", "mxfp4",
        ] {
            let format = quant::format_of(dtype).unwrap();
            let k = if dtype.ends_with("_k") { 256 } else { 64 };
            let p = instantiate(
                &Problem::new("gemv", dtype, [("n", 4), ("k", k)]).unwrap(),
                &machine(),
            )
            .unwrap();
            let variants: Vec<&str> = p.candidates().iter().map(|c| c.variant()).collect();
            assert!(variants.iter().any(|v| v.ends_with(".a8")), "{variants:?}");
            let kinds: &[&str] = if tiletune_kernels::qgemm::supports(format) {
                assert!(variants[0].ends_with(".qgemm"), "{dtype}: {variants:?}");
                assert!(
                    p.candidates()
                        .iter()
                        .filter(|c| c.variant().ends_with(".qgemm"))
                        .all(|c| c.params()["mr"] == 1),
                    "{dtype}: decode is m = 1"
                );
                &["a8", "qgemm"]
            } else {
                assert!(variants.iter().any(|v| v.ends_with(".a32")), "{variants:?}");
                &["a8", "a32"]
            };
            assert!(variants.iter().all(|v| {
                let (isa, kind) = v.split_once('.').unwrap();
                isa.parse::<Isa>().is_ok() && kinds.contains(&kind)
            }));
        }
    }

    #[test]
    fn quantized_prefill_searches_the_gemm_and_the_per_row_gemv() {
        let p = instantiate(
            &Problem::new("gemm", "q8_0", [("m", 16), ("n", 8), ("k", 64)]).unwrap(),
            &machine(),
        )
        .unwrap();
        let variants: Vec<&str> = p.candidates().iter().map(|c| c.variant()).collect();
        assert!(variants[0].ends_with(".qgemm"), "{variants:?}");
        assert!(variants.iter().any(|v| v.ends_with(".a8")), "{variants:?}");
        assert!(variants.iter().all(|v| {
            let (isa, kind) = v.split_once('.').unwrap();
            isa.parse::<Isa>().is_ok() && matches!(kind, "a8" | "qgemm")
        }));
        // The K-quants have both too.
        let p = instantiate(
            &Problem::new("gemm", "q4_k", [("m", 4), ("n", 4), ("k", 256)]).unwrap(),
            &machine(),
        )
        .unwrap();
        assert!(p.candidates()[0].variant().ends_with(".qgemm"));
        assert!(p.candidates().iter().any(|c| c.variant().ends_with(".a8")));
    }

    #[test]
    fn unknown_dtype_and_op_are_clear_errors() {
        let e = instantiate(
            &Problem::new("gemv", "q9_9", [("n", 4), ("k", 4)]).unwrap(),
            &machine(),
        );
        assert!(matches!(e, Err(TunerError::UnsupportedDtype { .. })));
        let e = instantiate(
            &Problem::new("conv", "f32", [("n", 4)]).unwrap(),
            &machine(),
        );
        let msg = e.err().unwrap().to_string();
        assert_eq!(
            msg,
            "unknown op `conv`; the ops here are gemv, gemm, i8gemm"
        );
        let e = parse_bench_problem("conv", "f32", "4x4").err().unwrap();
        assert!(e.to_string().contains("attention"), "{e}");
    }

    #[test]
    fn every_op_on_every_available_isa_validates_with_one_candidate() {
        let specs = [
            ("gemv", "f32", "7x33"),
            ("gemv", "f16", "5x17"),
            ("gemm", "f32", "3x5x19"),
            ("gemm", "q4_1", "3x5x64"),
            ("gemm", "q8_0", "5x19x96"),
            ("qgemv_a32", "q5_1", "3x64"),
            ("qgemv_a8", "q6_k", "2x256"),
            ("qgemv_a32", "q5_k", "3x256"),
            ("gemm", "q5_k", "3x5x256"),
            ("qgemv_a8", "q8_0", "5x96"),
            ("eltwise_gelu_erf", "f32", "37"),
            ("eltwise_sigmoid", "f32", "1"),
            ("rms_norm", "f32", "3x21"),
            ("layer_norm", "f32", "2x16"),
            ("softmax", "f32", "4x9"),
            ("rope", "f32", "3x2x10"),
        ];
        for (op, dtype, shape) in specs {
            let spec = parse_bench_problem(op, dtype, shape).unwrap();
            for isa in Isa::ALL.into_iter().filter(|i| i.is_available()) {
                for cold in [false, true] {
                    let cfg = OneConfig {
                        isa: Some(isa),
                        threads: Some(2),
                        cold,
                        ..OneConfig::default()
                    };
                    let mut p = one(&spec, &cfg);
                    assert_eq!(p.candidates().len(), 1);
                    assert_eq!(p.candidates()[0].threads(), 2);
                    match p.validate(0) {
                        Ok(err) => assert!(err <= p.tolerance(), "{spec} {isa}: {err}"),
                        // A family without this variant says so.
                        Err(e) => assert!(e.contains("variant"), "{spec} {isa}: {e}"),
                    }
                    p.run(0);
                    p.run(0);
                    let w = p.work();
                    assert!(w.bytes > 0, "{spec}");
                }
            }
        }
    }

    #[test]
    fn params_json_and_bad_input_are_checked() {
        let spec = parse_bench_problem("qgemv_a32", "q4_0", "4x64").unwrap();
        let cfg = OneConfig {
            params: Some(serde_json::json!({"rows_per_block": 2})),
            ..OneConfig::default()
        };
        let p = one(&spec, &cfg);
        assert_eq!(p.candidates()[0].params()["rows_per_block"], 2);
        let bad = |spec: &Problem, cfg: OneConfig| {
            instantiate_one(spec, &Machine::small_for_tests(3), &cfg)
                .err()
                .map(|e| e.to_string())
                .unwrap_or_else(|| panic!("{spec} should fail"))
        };
        let e = bad(
            &spec,
            OneConfig {
                params: Some(serde_json::json!({"rows_per_block": 3})),
                ..OneConfig::default()
            },
        );
        assert!(e.contains("rows_per_block 3"), "{e}");
        let e = bad(
            &spec,
            OneConfig {
                params: Some(serde_json::json!({"rows": 3})),
                ..OneConfig::default()
            },
        );
        assert!(e.contains("do not parse"), "{e}");
        let e = bad(
            &parse_bench_problem("qgemv_a32", "q4_k", "4x64").unwrap(),
            OneConfig::default(),
        );
        assert!(e.contains("256"), "{e}");
        let e = bad(
            &Problem::new("softmax", "f16", [("rows", 1), ("dim", 4)]).unwrap(),
            OneConfig::default(),
        );
        assert!(e.contains("supported: f32"), "{e}");
        let e = bad(
            &Problem::new("eltwise_tanhx", "f32", [("len", 4)]).unwrap(),
            OneConfig::default(),
        );
        assert!(e.contains("unknown element-wise op"), "{e}");
        assert!(parse_bench_problem("rope", "f32", "2x3").is_err());
        assert!(parse_bench_problem("conv", "f32", "2").is_err());
        let missing = Isa::ALL.into_iter().find(|i| !i.is_available()).unwrap();
        let e = bad(
            &parse_bench_problem("gemv", "f32", "4x4").unwrap(),
            OneConfig {
                isa: Some(missing),
                ..OneConfig::default()
            },
        );
        assert!(e.contains("not available"), "{e}");
    }

    /// Q4_1 / Q5_1 × Q8_1 are defined with the activation block's stored
    /// `s`: against the exact `Σx` the W·A8 GEMV is 1.7e-5 (of Σ|w·x|) off
    /// at 4096×4096 and ~1e-6 over these 64 rows; with the stored `s` only
    /// f32 rounding is left (~1e-8).
    #[test]
    fn min_formats_are_checked_against_the_product_with_the_stored_s() {
        for dtype in ["q4_1", "q5_1"] {
            let spec = parse_bench_problem("qgemv_a8", dtype, "64x4096").unwrap();
            let mut p = one(&spec, &OneConfig::default());
            let err = p.validate(0).unwrap();
            assert!(err < 2e-7, "{dtype}: {err}");
        }
    }

    /// Every op, dtype and available ISA validates against its reference,
    /// with one and two threads, warm and cold; an ISA a family lacks says so.
    #[test]
    fn every_op_validates_on_every_available_isa() {
        type Case<'a> = (&'a str, &'a str, &'a str, &'a [(&'a str, usize)]);
        let cases: &[Case] = &[
            ("attention", "f32", "4x2x16x37", &[("rows", 1), ("page", 8)]),
            ("attention", "f16", "2x1x8x20", &[("rows", 5)]),
            (
                "attention",
                "q8_0",
                "4x4x32x70",
                &[("rows", 3), ("page", 16)],
            ),
            ("i8gemm", "i8", "1x9x40", &[]),
            ("i8gemm", "i8_zp", "3x5x33", &[]),
            ("embed_lookup", "u3", "5x11x64", &[]),
            ("embed_lookup", "u7", "2x3x128", &[("group", 64)]),
            ("lm_head", "u1", "13x64", &[]),
            ("lm_head", "u5", "6x256", &[("group", 128)]),
            ("matmul_rope", "f32", "3x2x8x19", &[]),
            ("matmul_rope", "f16", "1x3x16x33", &[]),
        ];
        for &(op, dtype, shape, extra) in cases {
            for isa in Isa::ALL.into_iter().filter(|i| i.is_available()) {
                for (threads, cold) in [(1, false), (2, true)] {
                    let cfg = OneConfig {
                        isa: Some(isa),
                        threads: (op != "embed_lookup").then_some(threads),
                        cold,
                        ..OneConfig::default()
                    };
                    let what = format!("{op} {dtype} {shape} {extra:?} {isa} t{threads}");
                    let mut p = match build(op, dtype, shape, extra, &cfg) {
                        Ok(p) => p,
                        Err(e) => {
                            assert!(e.contains("variant"), "{what}: {e}");
                            continue;
                        }
                    };
                    assert_eq!(p.candidates().len(), 1);
                    match p.validate(0) {
                        Ok(err) => assert!(err <= p.tolerance(), "{what}: error {err}"),
                        Err(e) => assert!(e.contains("variant"), "{what}: {e}"),
                    }
                    p.run(0);
                    p.run(0);
                    let w = p.work();
                    assert!(w.bytes > 0, "{what}");
                    assert_eq!(w.flops == 0, op == "embed_lookup", "{what}");
                }
            }
        }
    }

    #[test]
    fn bad_input_says_what_to_do() {
        let err = |op: &str, dtype: &str, shape: &str, extra: &[(&str, usize)], cfg: OneConfig| {
            build(op, dtype, shape, extra, &cfg)
                .err()
                .unwrap_or_else(|| panic!("{op} {shape} should fail"))
        };
        let d = OneConfig::default;
        assert!(err("attention", "f32", "4x2x16x8", &[("rows", 9)], d()).contains("--rows"));
        assert!(err("attention", "f32", "3x2x16x8", &[], d()).contains("multiple of kv_heads"));
        assert!(err("attention", "q8_0", "2x2x16x8", &[], d()).contains("multiple of 32"));
        assert!(
            err("attention", "bf16", "2x2x16x8", &[], d()).contains("supported: f32, f16, q8_0")
        );
        assert!(err("attention", "f32", "2x2x16", &[], d()).contains("heads"));
        assert!(err("i8gemm", "i8", "1x4x70000", &[], d()).contains("exceeds"));
        assert!(err("i8gemm", "i8", "1x4x8", &[("rows", 2)], d()).contains("optionally"));
        assert!(err("lm_head", "u8", "4x64", &[], d()).contains("supported"));
        assert!(err("lm_head", "u4", "4x40", &[], d()).contains("embed"));
        assert!(err("matmul_rope", "f32", "1x2x7x8", &[], d()).contains("even"));
        let threads2 = OneConfig {
            threads: Some(2),
            ..OneConfig::default()
        };
        assert!(err("embed_lookup", "u4", "2x4x64", &[], threads2).contains("one thread"));
        let avx = OneConfig {
            isa: Some(Isa::Avx2),
            ..OneConfig::default()
        };
        assert!(err("embed_lookup", "u4", "2x4x64", &[], avx).contains("variant"));
    }
}
