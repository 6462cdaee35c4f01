//! Kernel identity as plain data: a [`Problem`] `(op, dtype, named dims)` and a
//! [`Candidate`] `(variant, params, threads)`, each with a stable key string.
//! The keys are the primary keys of the selector table, so they must not change
//! with serde features, map ordering or platform.
//!
//! Key formats (version 1, documented here because files outlive builds):
//! - problem: `{op}/{dtype}/{dim}={size},{dim}={size}…`, dims in the order the
//!   kernel family lists them (e.g. `gemv/q4_0/n=4864,k=896`,
//!   `gemm/f32/m=1,n=4864,k=896`). The order is part of the key: a family
//!   always lists its dims in one canonical order.
//! - candidate: `{variant}/{placement}/{params}`, where placement is the
//!   thread placement's name (`t{threads}` when the workers are not pinned,
//!   `t{threads}@cluster{c}[+{d}…]` when they are, see [`Placement`]) and
//!   params is the canonical JSON object (keys sorted bytewise at every level,
//!   no whitespace), e.g. `avx512/t2/{"kc":256,"nr":8,"unroll":4}` or
//!   `neon/t2@cluster1/{"nr":4}`. An unpinned candidate's key is the key of
//!   version 1 (`{variant}/t{threads}/{params}`), so rows written before
//!   placements existed keep their keys.
//!
//! Names (op, dtype, variant, dim names) are restricted to ASCII letters,
//! digits and `_ . -` so the separators `/ , = x` can never be ambiguous.

use crate::error::{Result, TableError};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::fmt;

fn check_name(what: &'static str, value: &str) -> Result<()> {
    let reason = if value.is_empty() {
        Some("must not be empty".to_string())
    } else if value.len() > 64 {
        Some("must be at most 64 characters".to_string())
    } else {
        value
            .chars()
            .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-')))
            .map(|c| {
                format!("character {c:?} is not allowed (use ascii letters, digits, '_', '.', '-')")
            })
    };
    match reason {
        Some(reason) => Err(TableError::InvalidKey {
            what,
            value: value.to_string(),
            reason,
        }),
        None => Ok(()),
    }
}

/// One kernel problem: the operation, the data type, and named dimensions in the
/// family's canonical order. Construct with [`Problem::new`] (validated).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "ProblemRepr", into = "ProblemRepr")]
pub struct Problem {
    op: String,
    dtype: String,
    dims: Vec<(String, usize)>,
}

/// The serialized shape of a [`Problem`]: `{"op":"gemv","dtype":"q4_0","dims":[["n",4864],["k",896]]}`.
/// Dims are a list of pairs, not an object, because their order is meaningful.
#[derive(Clone, Serialize, Deserialize)]
struct ProblemRepr {
    op: String,
    dtype: String,
    dims: Vec<(String, usize)>,
}

impl TryFrom<ProblemRepr> for Problem {
    type Error = TableError;
    fn try_from(r: ProblemRepr) -> Result<Self> {
        Problem::new(r.op, r.dtype, r.dims)
    }
}

impl From<Problem> for ProblemRepr {
    fn from(p: Problem) -> Self {
        ProblemRepr {
            op: p.op,
            dtype: p.dtype,
            dims: p.dims,
        }
    }
}

impl Problem {
    /// A validated problem. Dims keep the given order; names must be unique.
    pub fn new<N: Into<String>>(
        op: impl Into<String>,
        dtype: impl Into<String>,
        dims: impl IntoIterator<Item = (N, usize)>,
    ) -> Result<Self> {
        let op = op.into();
        let dtype = dtype.into();
        check_name("op", &op)?;
        check_name("dtype", &dtype)?;
        let dims: Vec<(String, usize)> = dims.into_iter().map(|(n, v)| (n.into(), v)).collect();
        for (i, (name, _)) in dims.iter().enumerate() {
            check_name("dim name", name)?;
            if dims[..i].iter().any(|(n, _)| n == name) {
                return Err(TableError::InvalidKey {
                    what: "dim name",
                    value: name.clone(),
                    reason: "appears twice in one problem".to_string(),
                });
            }
        }
        Ok(Problem { op, dtype, dims })
    }

    /// Parses a key written by [`Problem::key`].
    pub fn parse_key(key: &str) -> Result<Self> {
        let bad = |reason: &str| TableError::InvalidKey {
            what: "problem key",
            value: key.to_string(),
            reason: reason.to_string(),
        };
        let mut parts = key.splitn(3, '/');
        let (Some(op), Some(dtype), Some(dims)) = (parts.next(), parts.next(), parts.next()) else {
            return Err(bad("expected op/dtype/dim=size,…"));
        };
        let mut out = Vec::new();
        if !dims.is_empty() {
            for d in dims.split(',') {
                let (name, size) = d.split_once('=').ok_or_else(|| bad("a dim lacks '='"))?;
                let size: usize = size
                    .parse()
                    .map_err(|_| bad("a dim size is not a number"))?;
                out.push((name, size));
            }
        }
        Problem::new(op, dtype, out)
    }

    pub fn op(&self) -> &str {
        &self.op
    }

    pub fn dtype(&self) -> &str {
        &self.dtype
    }

    /// Named dims in canonical order.
    pub fn dims(&self) -> &[(String, usize)] {
        &self.dims
    }

    /// The size of one named dim.
    pub fn dim(&self, name: &str) -> Option<usize> {
        self.dims.iter().find(|(n, _)| n == name).map(|&(_, v)| v)
    }

    /// The stable key, e.g. `gemv/q4_0/n=4864,k=896`.
    pub fn key(&self) -> String {
        format!("{}/{}/{}", self.op, self.dtype, self.dims_string())
    }

    /// `n=4864,k=896`.
    pub fn dims_string(&self) -> String {
        let parts: Vec<String> = self.dims.iter().map(|(n, v)| format!("{n}={v}")).collect();
        parts.join(",")
    }

    /// `4864x896`: sizes only, for tables meant for people.
    pub fn shape_string(&self) -> String {
        let parts: Vec<String> = self.dims.iter().map(|(_, v)| v.to_string()).collect();
        parts.join("x")
    }

    /// Whether two problems are of the same family and have the same dim names
    /// (in any order), so that a shape distance between them means something.
    pub fn comparable(&self, other: &Problem) -> bool {
        self.op == other.op
            && self.dtype == other.dtype
            && self.dims.len() == other.dims.len()
            && self.dims.iter().all(|(n, _)| other.dim(n).is_some())
    }

    /// Squared distance in log space: Σ over dims (matched by name) of
    /// (ln a − ln b)². A ratio matters, not a difference: 896→1792 is as far as
    /// 4864→9728. Sizes of 0 count as 1 so the distance stays finite. `None`
    /// when the problems are not [`comparable`](Problem::comparable).
    pub fn log_distance(&self, other: &Problem) -> Option<f64> {
        if !self.comparable(other) {
            return None;
        }
        let ln = |v: usize| (v.max(1) as f64).ln();
        Some(
            self.dims
                .iter()
                .map(|(n, a)| {
                    // comparable() guarantees the name exists in `other`.
                    let b = other.dim(n).unwrap_or(*a);
                    (ln(*a) - ln(b)).powi(2)
                })
                .sum(),
        )
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.key())
    }
}

/// Writes `v` as canonical JSON: object keys sorted bytewise at every level,
/// no whitespace. Independent of serde_json's `preserve_order` feature, which
/// another crate in the build could switch on.
pub fn canonical_json(v: &Value) -> String {
    let mut out = String::new();
    write_canonical(v, &mut out);
    out
}

fn write_canonical(v: &Value, out: &mut String) {
    match v {
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
            out.push('{');
            for (i, (k, v)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(k.clone()).to_string());
                out.push(':');
                write_canonical(v, out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, v) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(v, out);
            }
            out.push(']');
        }
        scalar => out.push_str(&scalar.to_string()),
    }
}

/// Where a candidate's workers run: `threads` workers, either not pinned
/// (name `t{threads}`) or pinned to `cpus`, the CPUs of the SoC clusters
/// `clusters` (indices in the order `tiletune probe` lists them; name
/// `t{threads}@cluster{a}[+{b}…]`). The pool's worker `i` is pinned to
/// `cpus[i % cpus.len()]` and the calling thread to the whole set.
///
/// The CPUs are stored with the name, so a reader (the runtime) can check
/// that the machine has them without resolving cluster indices. Construct
/// with [`Placement::unpinned`], [`Placement::pinned`] or
/// [`Placement::from_name`] (all validated).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "PlacementRepr", into = "PlacementRepr")]
pub struct Placement {
    threads: usize,
    clusters: Vec<usize>,
    cpus: Vec<usize>,
}

/// Serialized as `{"name": "t2@cluster1", "cpus": [4, 5]}`.
#[derive(Clone, Serialize, Deserialize)]
struct PlacementRepr {
    name: String,
    #[serde(default)]
    cpus: Vec<usize>,
}

impl TryFrom<PlacementRepr> for Placement {
    type Error = TableError;
    fn try_from(r: PlacementRepr) -> Result<Self> {
        Placement::from_name(&r.name, r.cpus)
    }
}

impl From<Placement> for PlacementRepr {
    fn from(p: Placement) -> Self {
        PlacementRepr {
            name: p.name(),
            cpus: p.cpus,
        }
    }
}

impl Placement {
    /// `threads` workers, not pinned (`t{threads}`).
    pub fn unpinned(threads: usize) -> Result<Self> {
        check_threads(threads)?;
        Ok(Placement {
            threads,
            clusters: Vec::new(),
            cpus: Vec::new(),
        })
    }

    /// `threads` workers pinned to `cpus`, the CPUs of `clusters`. Both
    /// lists must be non-empty; they are sorted and deduplicated; the workers
    /// must fit the CPUs (one CPU each).
    pub fn pinned(threads: usize, clusters: Vec<usize>, cpus: Vec<usize>) -> Result<Self> {
        check_threads(threads)?;
        let bad = |reason: String| TableError::InvalidKey {
            what: "placement",
            value: format!("t{threads} on clusters {clusters:?}, cpus {cpus:?}"),
            reason,
        };
        if clusters.is_empty() || cpus.is_empty() {
            return Err(bad(
                "a pinned placement names at least one cluster and one cpu".into(),
            ));
        }
        let mut sorted_clusters = clusters.clone();
        sorted_clusters.sort_unstable();
        sorted_clusters.dedup();
        let mut sorted_cpus = cpus.clone();
        sorted_cpus.sort_unstable();
        sorted_cpus.dedup();
        if threads > sorted_cpus.len() {
            return Err(bad(format!(
                "{threads} workers do not fit {} cpu(s)",
                sorted_cpus.len()
            )));
        }
        Ok(Placement {
            threads,
            clusters: sorted_clusters,
            cpus: sorted_cpus,
        })
    }

    /// Parses a name written by [`Placement::name`] with the CPUs it pins to
    /// (empty for an unpinned name).
    pub fn from_name(name: &str, cpus: Vec<usize>) -> Result<Self> {
        let bad = |reason: &str| TableError::InvalidKey {
            what: "placement",
            value: name.to_string(),
            reason: reason.to_string(),
        };
        let (t, at) = match name.split_once('@') {
            Some((t, at)) => (t, Some(at)),
            None => (name, None),
        };
        let threads: usize = t
            .strip_prefix('t')
            .filter(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|n| n.parse().ok())
            .ok_or_else(|| bad("expected t<threads>[@cluster<a>[+<b>...]], e.g. t2@cluster1"))?;
        let Some(at) = at else {
            if !cpus.is_empty() {
                return Err(bad("an unpinned placement lists no cpus"));
            }
            if t.len() > 1 && t.as_bytes()[1] == b'0' {
                return Err(bad("the thread count has no leading zeros"));
            }
            return Placement::unpinned(threads);
        };
        let list = at
            .strip_prefix("cluster")
            .ok_or_else(|| bad("after @ comes cluster<index>, e.g. t2@cluster1"))?;
        let clusters = list
            .split('+')
            .map(|c| {
                c.parse::<usize>()
                    .ok()
                    .filter(|_| c.bytes().all(|b| b.is_ascii_digit()))
            })
            .collect::<Option<Vec<usize>>>()
            .ok_or_else(|| bad("cluster indices are decimal numbers joined by +"))?;
        let p = Placement::pinned(threads, clusters, cpus)?;
        // The name must be the canonical one, so that one placement has one key.
        if p.name() != name {
            return Err(bad(
                "no leading zeros, and cluster indices ascending and listed once",
            ));
        }
        Ok(p)
    }

    /// The stable name: `t4`, `t2@cluster1`, `t3@cluster1+2`.
    pub fn name(&self) -> String {
        if self.clusters.is_empty() {
            return format!("t{}", self.threads);
        }
        let list: Vec<String> = self.clusters.iter().map(|c| c.to_string()).collect();
        format!("t{}@cluster{}", self.threads, list.join("+"))
    }

    pub fn threads(&self) -> usize {
        self.threads
    }

    /// Cluster indices (empty: not pinned).
    pub fn clusters(&self) -> &[usize] {
        &self.clusters
    }

    /// The CPUs the workers are pinned to, ascending (empty: not pinned).
    pub fn cpus(&self) -> &[usize] {
        &self.cpus
    }

    pub fn is_pinned(&self) -> bool {
        !self.cpus.is_empty()
    }
}

impl fmt::Display for Placement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name())
    }
}

fn check_threads(threads: usize) -> Result<()> {
    if threads == 0 {
        return Err(TableError::InvalidKey {
            what: "candidate threads",
            value: "0".to_string(),
            reason: "must be at least 1".to_string(),
        });
    }
    Ok(())
}

/// One way to run a problem: an ISA variant, its tile parameters (a JSON
/// object), and a thread placement (a thread count, pinned or not).
/// Construct with [`Candidate::new`] (unpinned) or [`Candidate::placed`]
/// (validated).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "CandidateRepr", into = "CandidateRepr")]
pub struct Candidate {
    variant: String,
    params: Value,
    placement: Placement,
}

/// `{"variant", "params", "threads"}` plus `"placement"` when pinned: an
/// unpinned candidate serializes exactly as before placements existed, and
/// JSON without `placement` reads as unpinned.
#[derive(Clone, Serialize, Deserialize)]
struct CandidateRepr {
    variant: String,
    params: Value,
    threads: usize,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    placement: Option<Placement>,
}

impl TryFrom<CandidateRepr> for Candidate {
    type Error = TableError;
    fn try_from(r: CandidateRepr) -> Result<Self> {
        let c = Candidate::new(r.variant, r.params, r.threads)?;
        match r.placement {
            Some(p) => c.with_placement(p),
            None => Ok(c),
        }
    }
}

impl From<Candidate> for CandidateRepr {
    fn from(c: Candidate) -> Self {
        CandidateRepr {
            variant: c.variant,
            params: c.params,
            threads: c.placement.threads,
            placement: c.placement.is_pinned().then_some(c.placement),
        }
    }
}

impl Candidate {
    /// A validated, unpinned candidate. `params` must be a JSON object
    /// (`null` means `{}`, a kernel without tile parameters); `threads` at
    /// least 1.
    pub fn new(variant: impl Into<String>, params: Value, threads: usize) -> Result<Self> {
        let variant = variant.into();
        check_name("variant", &variant)?;
        let params = match params {
            Value::Null => Value::Object(Default::default()),
            Value::Object(m) => Value::Object(m),
            other => {
                return Err(TableError::InvalidKey {
                    what: "candidate params",
                    value: other.to_string(),
                    reason: "must be a json object of named parameters".to_string(),
                });
            }
        };
        Ok(Candidate {
            variant,
            params,
            placement: Placement::unpinned(threads)?,
        })
    }

    /// A validated candidate running on `placement`.
    pub fn placed(variant: impl Into<String>, params: Value, placement: Placement) -> Result<Self> {
        Candidate::new(variant, params, placement.threads)?.with_placement(placement)
    }

    /// This candidate on another placement of the same thread count (the
    /// thread count may be part of the kernel's parameters, so it cannot
    /// change here).
    pub fn with_placement(mut self, placement: Placement) -> Result<Self> {
        if placement.threads != self.placement.threads {
            return Err(TableError::InvalidKey {
                what: "candidate placement",
                value: placement.name(),
                reason: format!(
                    "runs {} threads, the candidate {}",
                    placement.threads, self.placement.threads
                ),
            });
        }
        self.placement = placement;
        Ok(self)
    }

    pub fn variant(&self) -> &str {
        &self.variant
    }

    /// The parameters as a JSON object.
    pub fn params(&self) -> &Value {
        &self.params
    }

    pub fn threads(&self) -> usize {
        self.placement.threads
    }

    /// Where the workers run (pinned or not).
    pub fn placement(&self) -> &Placement {
        &self.placement
    }

    /// Canonical JSON of the params (sorted keys, no whitespace).
    pub fn params_json(&self) -> String {
        canonical_json(&self.params)
    }

    /// The stable key, e.g. `avx512/t2/{"kc":256,"nr":8}` or
    /// `neon/t2@cluster1/{"nr":4}`.
    pub fn key(&self) -> String {
        format!(
            "{}/{}/{}",
            self.variant,
            self.placement.name(),
            self.params_json()
        )
    }
}

impl fmt::Display for Candidate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.key())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn problem_key_is_stable_and_parses_back() {
        let p = Problem::new("gemv", "q4_0", [("n", 4864), ("k", 896)]).unwrap();
        assert_eq!(p.key(), "gemv/q4_0/n=4864,k=896");
        assert_eq!(p.shape_string(), "4864x896");
        assert_eq!(Problem::parse_key(&p.key()).unwrap(), p);
        let scalar = Problem::new("silu", "f32", Vec::<(String, usize)>::new()).unwrap();
        assert_eq!(scalar.key(), "silu/f32/");
        assert_eq!(Problem::parse_key("silu/f32/").unwrap(), scalar);
    }

    #[test]
    fn problem_rejects_ambiguous_names() {
        assert!(Problem::new("ge/mv", "q4_0", [("n", 1)]).is_err());
        assert!(Problem::new("gemv", "", [("n", 1)]).is_err());
        assert!(Problem::new("gemv", "q4_0", [("n", 1), ("n", 2)]).is_err());
        assert!(Problem::new("gemv", "q4_0", [("n=", 1)]).is_err());
        assert!(Problem::parse_key("gemv/q4_0/n=x").is_err());
        assert!(Problem::parse_key("gemv").is_err());
        let bad: std::result::Result<Problem, _> =
            serde_json::from_value(json!({"op":"a b","dtype":"f32","dims":[]}));
        assert!(bad.is_err());
    }

    #[test]
    fn problem_serde_round_trip_keeps_dim_order() {
        let p = Problem::new("gemm", "f32", [("m", 1), ("n", 64), ("k", 32)]).unwrap();
        let s = serde_json::to_string(&p).unwrap();
        assert_eq!(
            s,
            r#"{"op":"gemm","dtype":"f32","dims":[["m",1],["n",64],["k",32]]}"#
        );
        let back: Problem = serde_json::from_str(&s).unwrap();
        assert_eq!(back, p);
    }

    #[test]
    fn log_distance_matches_dims_by_name() {
        let a = Problem::new("gemv", "q4_0", [("n", 4864), ("k", 896)]).unwrap();
        let b = Problem::new("gemv", "q4_0", [("k", 896), ("n", 4864)]).unwrap();
        assert_eq!(a.log_distance(&b), Some(0.0));
        let c = Problem::new("gemv", "q4_0", [("n", 9728), ("k", 896)]).unwrap();
        let d = a.log_distance(&c).unwrap();
        assert!((d - 2f64.ln().powi(2)).abs() < 1e-12, "{d}");
        let other_dtype = Problem::new("gemv", "q8_0", [("n", 4864), ("k", 896)]).unwrap();
        assert_eq!(a.log_distance(&other_dtype), None);
        let other_dims = Problem::new("gemv", "q4_0", [("n", 4864), ("m", 896)]).unwrap();
        assert_eq!(a.log_distance(&other_dims), None);
    }

    #[test]
    fn candidate_key_is_canonical_whatever_the_insertion_order() {
        let mut m = serde_json::Map::new();
        m.insert("unroll".into(), json!(4));
        m.insert("kc".into(), json!(256));
        m.insert("nr".into(), json!({"z": 1, "a": [2, {"y": 1, "b": 0}]}));
        let c = Candidate::new("avx512", Value::Object(m), 2).unwrap();
        assert_eq!(
            c.key(),
            r#"avx512/t2/{"kc":256,"nr":{"a":[2,{"b":0,"y":1}],"z":1},"unroll":4}"#
        );
        let d = Candidate::new("scalar", Value::Null, 1).unwrap();
        assert_eq!(d.key(), "scalar/t1/{}");
        assert!(Candidate::new("neon", json!([1]), 1).is_err());
        assert!(Candidate::new("neon", json!({}), 0).is_err());
        assert!(Candidate::new("ne/on", json!({}), 1).is_err());
        let back: Candidate = serde_json::from_str(&serde_json::to_string(&c).unwrap()).unwrap();
        assert_eq!(back.key(), c.key());
    }

    #[test]
    fn placements_name_parse_and_validate() {
        let p = Placement::pinned(2, vec![2, 1], vec![5, 4, 3, 3]).unwrap();
        assert_eq!(p.name(), "t2@cluster1+2");
        assert_eq!(p.cpus(), [3, 4, 5]);
        assert_eq!(Placement::from_name(&p.name(), vec![3, 4, 5]).unwrap(), p);
        let u = Placement::unpinned(4).unwrap();
        assert_eq!((u.name(), u.is_pinned()), ("t4".to_string(), false));
        assert_eq!(Placement::from_name("t4", vec![]).unwrap(), u);
        for (bad, cpus) in [
            ("t0", vec![]),
            ("4", vec![]),
            ("t+4", vec![]),
            ("t04", vec![]),
            ("t4", vec![1]),
            ("t2@cluster1", vec![]),
            ("t2@cluster1", vec![4]),
            ("t1@big", vec![4]),
            ("t1@cluster", vec![4]),
            ("t1@cluster2+1", vec![4]),
            ("t1@cluster1+1", vec![4]),
            ("t1@cluster+1", vec![4]),
        ] {
            assert!(Placement::from_name(bad, cpus).is_err(), "{bad}");
        }
    }

    #[test]
    fn pinned_candidates_key_and_serialize_their_placement() {
        let p = Placement::pinned(2, vec![1], vec![4, 5]).unwrap();
        let c = Candidate::placed("neon", json!({"nr": 4}), p.clone()).unwrap();
        assert_eq!(c.key(), r#"neon/t2@cluster1/{"nr":4}"#);
        assert_eq!(c.threads(), 2);
        let s = serde_json::to_string(&c).unwrap();
        assert_eq!(
            s,
            r#"{"variant":"neon","params":{"nr":4},"threads":2,"placement":{"name":"t2@cluster1","cpus":[4,5]}}"#
        );
        let back: Candidate = serde_json::from_str(&s).unwrap();
        assert_eq!(back, c);
        // Unpinned candidates serialize as before placements existed, and
        // old JSON reads as unpinned.
        let u = Candidate::new("neon", json!({"nr": 4}), 2).unwrap();
        let s = serde_json::to_string(&u).unwrap();
        assert_eq!(s, r#"{"variant":"neon","params":{"nr":4},"threads":2}"#);
        assert_eq!(serde_json::from_str::<Candidate>(&s).unwrap(), u);
        assert_eq!(u.placement().name(), "t2");
        // The thread count is the candidate's: a placement cannot change it.
        assert!(
            u.clone()
                .with_placement(Placement::unpinned(3).unwrap())
                .is_err()
        );
        let bad = r#"{"variant":"neon","params":{},"threads":1,"placement":{"name":"t2@cluster1","cpus":[4,5]}}"#;
        assert!(serde_json::from_str::<Candidate>(bad).is_err());
    }

    #[test]
    fn canonical_json_escapes_keys() {
        let v = json!({"b\"q": "x\ny", "a": 1.5});
        assert_eq!(canonical_json(&v), r#"{"a":1.5,"b\"q":"x\ny"}"#);
    }
}
