//! Physical constants (SI units), below everything that uses them.

/// Speed of light in vacuum, m/s.
pub const C0: f64 = 299_792_458.0;
/// Vacuum permittivity, F/m.
pub const EPS0: f64 = 8.854_187_812_8e-12;
