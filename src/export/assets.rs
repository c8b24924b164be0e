//! The files an export copies as this build of haloscope has them: the support header, the
//! kernels and their access annotations (read by `safe` for the names they take, written by
//! the export).

/// The support header.
pub const HALO_CUH: &str = include_str!("../../assets/export/halo.cuh");
/// The kernels' access annotations, for a checker of recorded calls.
pub const ACCESS: &str = include_str!("../../assets/export/access.txt");
/// The kernels, by file name.
pub const KERNELS: [(&str, &str); 3] = [
    ("fdtd1d.cu", include_str!("../../kernels/fdtd1d.cu")),
    ("fdtd2d.cu", include_str!("../../kernels/fdtd2d.cu")),
    ("fused.cu", include_str!("../../kernels/fused.cu")),
];
