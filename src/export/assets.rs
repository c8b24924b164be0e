//! The files an export copies as this build of haloscope has them: the support header, the
//! kernels and their access annotations (read by `safe` for the names they take, written by
//! the export).

/// The support header, every part of it (`//@if COND …` marks the parts only some
/// programs use: see [`kept`]).
pub const HALO_CUH: &str = include_str!("../../assets/export/halo.cuh");
/// The kernels' access annotations, for a checker of recorded calls.
pub const ACCESS: &str = include_str!("../../assets/export/access.txt");
/// The kernels, by file name.
pub const KERNELS: [(&str, &str); 3] = [
    ("fdtd1d.cu", include_str!("../../kernels/fdtd1d.cu")),
    ("fdtd2d.cu", include_str!("../../kernels/fdtd2d.cu")),
    ("fused.cu", include_str!("../../kernels/fused.cu")),
];

/// `text` with the parts marked `//@if COND…` (to the matching `//@end`, nested) kept where
/// every one of its conditions is in `have`, dropped where not; the mark lines themselves
/// dropped. An export keeps of halo.cuh what its program uses: `1d` or `2d`, `fused`, `flags`.
pub fn kept(text: &str, have: &[&str]) -> String {
    let mut out = String::with_capacity(text.len());
    let mut open: Vec<bool> = Vec::new();
    for line in text.lines() {
        let t = line.trim_start();
        if let Some(conds) = t.strip_prefix("//@if ") {
            open.push(conds.split_whitespace().all(|c| have.contains(&c)));
        } else if t == "//@end" {
            open.pop();
        } else if open.iter().all(|&k| k) {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

/// The kernel files an export with the parts `have` includes.
pub fn kernels_kept(have: &[&str]) -> Vec<(&'static str, &'static str)> {
    KERNELS
        .iter()
        .filter(|(name, _)| match *name {
            "fdtd1d.cu" => have.contains(&"1d"),
            "fdtd2d.cu" => have.contains(&"2d"),
            "fused.cu" => have.contains(&"fused"),
            _ => true,
        })
        .copied()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marked_parts_are_kept_only_where_every_condition_holds() {
        let text = "a\n//@if 1d\nb\n    //@if fused 1d\n    c\n    //@end\n//@end\n//@if 2d\nd\n//@end\ne\n";
        assert_eq!(kept(text, &["1d"]), "a\nb\ne\n");
        assert_eq!(kept(text, &["1d", "fused"]), "a\nb\n    c\ne\n");
        assert_eq!(kept(text, &["2d", "fused"]), "a\nd\ne\n");
        // The shipped header: every mark closed, and no mark left in what any export keeps.
        for have in [&["1d"][..], &["2d", "fused", "flags"], &["1d", "fused"]] {
            let k = kept(HALO_CUH, have);
            assert!(!k.contains("//@"), "{have:?}");
        }
        let marks = |w: &str| HALO_CUH.lines().filter(|l| l.trim_start().starts_with(w)).count();
        assert_eq!(marks("//@if "), marks("//@end"));
        let names: Vec<&str> = kernels_kept(&["2d"]).iter().map(|k| k.0).collect();
        assert_eq!(names, ["fdtd2d.cu"]);
    }
}
