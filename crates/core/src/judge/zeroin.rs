//! Brent's root finder (the classic "zeroin" of Brent 1973 / Forsythe–Malcolm–Moler), with the
//! tolerance and iteration budget Kayenta's Mann-Whitney uses. The rank-sum statistic is a step
//! function of the shift, so *which* point of a flat step the solver lands on matters: zeroin's
//! interpolation steps land where Kayenta's do; a bisection would not.

/// The absolute tolerance on the root (Kayenta's 1e-4).
pub const TOLERANCE: f64 = 1e-4;
/// The most iterations before the current best point is returned.
pub const MAX_ITERATIONS: usize = 1000;

/// Finds a zero of `f` in `[lower, upper]`, given `f(lower)` and `f(upper)` (which should have
/// opposite signs). An endpoint whose value is exactly zero is returned at once. When the budget
/// runs out, the best point so far is returned. Errors from `f` are passed through.
pub fn zeroin<E>(
    lower: f64,
    upper: f64,
    f_lower: f64,
    f_upper: f64,
    mut f: impl FnMut(f64) -> Result<f64, E>,
) -> Result<f64, E> {
    if f_lower == 0.0 {
        return Ok(lower);
    }
    if f_upper == 0.0 {
        return Ok(upper);
    }
    // `b` is the best point so far, `a` the previous one, `c` the point that brackets the root
    // with `b`.
    let (mut a, mut fa) = (lower, f_lower);
    let (mut b, mut fb) = (upper, f_upper);
    let (mut c, mut fc) = (a, fa);
    for _ in 0..=MAX_ITERATIONS {
        let previous_step = b - a;
        if fc.abs() < fb.abs() {
            // Keep the best point in `b`.
            (a, fa) = (b, fb);
            (b, fb) = (c, fc);
            (c, fc) = (a, fa);
        }
        let tolerance = 2.0 * f64::EPSILON * b.abs() + TOLERANCE / 2.0;
        let mut step = (c - b) / 2.0;
        if step.abs() <= tolerance || fb == 0.0 {
            return Ok(b);
        }
        if previous_step.abs() >= tolerance && fa.abs() > fb.abs() {
            // Try interpolation: secant when only two points are known, inverse quadratic
            // otherwise.
            let cb = c - b;
            let (mut p, mut q);
            if a == c {
                let t1 = fb / fa;
                p = cb * t1;
                q = 1.0 - t1;
            } else {
                let qa = fa / fc;
                let t1 = fb / fc;
                let t2 = fb / fa;
                p = t2 * (cb * qa * (qa - t1) - (b - a) * (t1 - 1.0));
                q = (qa - 1.0) * (t1 - 1.0) * (t2 - 1.0);
            }
            if p > 0.0 {
                q = -q;
            } else {
                p = -p;
            }
            // Accept the interpolation only if it stays well inside the bracket and shrinks
            // faster than bisection would.
            if p < 0.75 * cb * q - (tolerance * q).abs() / 2.0
                && p < (previous_step * q / 2.0).abs()
            {
                step = p / q;
            }
        }
        if step.abs() < tolerance {
            step = if step > 0.0 { tolerance } else { -tolerance };
        }
        (a, fa) = (b, fb);
        b += step;
        fb = f(b)?;
        if (fb > 0.0 && fc > 0.0) || (fb < 0.0 && fc < 0.0) {
            (c, fc) = (a, fa);
        }
    }
    Ok(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn solve(lower: f64, upper: f64, f: impl Fn(f64) -> f64) -> f64 {
        zeroin::<()>(lower, upper, f(lower), f(upper), |x| Ok(f(x))).unwrap()
    }

    #[test]
    fn finds_smooth_roots_within_the_tolerance() {
        let root = solve(0.0, 2.0, |x| x * x - 2.0);
        assert!(
            (root - std::f64::consts::SQRT_2).abs() < TOLERANCE,
            "{root}"
        );
        let root = solve(-4.0, 1.0, |x| x.powi(3) + 3.0);
        assert!((root + 3f64.cbrt()).abs() < TOLERANCE, "{root}");
    }

    #[test]
    fn returns_an_endpoint_that_is_already_a_root() {
        assert_eq!(solve(1.0, 5.0, |x| x - 1.0), 1.0);
        assert_eq!(solve(-3.0, 5.0, |x| x - 5.0), 5.0);
    }

    #[test]
    fn passes_errors_through() {
        let result = zeroin(0.0, 1.0, -1.0, 1.0, |_| Err("boom"));
        assert_eq!(result, Err("boom"));
    }

    #[test]
    fn lands_inside_a_step_function_where_the_sign_changes() {
        // A decreasing step function that is zero on [2, 3): any point of that step is a root.
        let step = |x: f64| {
            if x < 2.0 {
                1.0
            } else if x < 3.0 {
                0.0
            } else {
                -1.0
            }
        };
        let root = solve(0.0, 10.0, step);
        assert!((2.0 - TOLERANCE..3.0 + TOLERANCE).contains(&root), "{root}");
    }
}
