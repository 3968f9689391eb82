//! A resource quantity's canonical form, as apimachinery's `Quantity.MarshalJSON` writes it
//! (`resource/quantity.go`: `CanonicalizeBytes`): the value rounded up to nanos; decimal forms
//! with an exponent that is a multiple of 3 (`0.5` → `500m`, `2000` → `2k`, `1e4` → `10e3`);
//! binary forms (`Ki`…`Ei`) kept binary when the value is a whole number of at least 1024 in
//! magnitude (`1024Mi` → `1Gi`, `1536Mi` stays), else written in decimal (`1.5Ki` → `1536`).

/// What a quantity's suffix says about how to write it back.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Format {
    DecimalSi,
    BinarySi,
    DecimalExponent,
}

/// Why a string is no quantity.
pub(super) type QuantityError = &'static str;

/// What Go's `Quantity.MarshalJSON` writes for `text`: `text` itself when `ParseQuantity` kept
/// it (its fast path: a value that fits, already in canonical shape, such as `+1`, `01`,
/// `1.500`, `1E3` or `1Gi`), else its canonical form.
pub(super) fn canonical(text: &str) -> Result<String, QuantityError> {
    let text = text.trim();
    if kept_as_written(text)? {
        return Ok(text.to_owned());
    }
    let (negative, digits, fraction, suffix) = split(text)?;
    let (format, base2, exp10) = interpret(suffix)?;
    // The value: mantissa × 10^scale, exact.
    let mut mantissa: i128 = 0;
    for d in digits.bytes().chain(fraction.bytes()) {
        mantissa = mantissa
            .checked_mul(10)
            .and_then(|m| m.checked_add(i128::from(d - b'0')))
            .ok_or("too large")?;
    }
    let mut scale = exp10 - fraction.len() as i32;
    if base2 > 0 {
        mantissa = mantissa.checked_mul(1i128 << base2).ok_or("too large")?;
    }
    // Rounded up to nanos (away from zero, as apimachinery rounds).
    if scale < -9 {
        let divisor = pow10(-9 - scale)?;
        mantissa = mantissa / divisor + i128::from(mantissa % divisor != 0);
        scale = -9;
    }
    if mantissa == 0 {
        return Ok("0".into());
    }
    if negative {
        mantissa = -mantissa;
    }
    let mut format = format;
    let mut whole = None;
    if format == Format::BinarySi {
        let magnitude_below_1024 = if scale >= 0 {
            mantissa.abs() < 1024 && scale == 0
                || mantissa
                    .abs()
                    .checked_mul(pow10(scale)?)
                    .is_some_and(|v| v < 1024)
        } else {
            mantissa.abs() < 1024 * pow10(-scale)?
        };
        if magnitude_below_1024 {
            format = Format::DecimalSi;
        } else if scale >= 0 {
            whole = Some(mantissa.checked_mul(pow10(scale)?).ok_or("too large")?);
        } else if mantissa % pow10(-scale)? == 0 {
            whole = Some(mantissa / pow10(-scale)?);
        } else {
            format = Format::DecimalSi;
        }
    }
    if let Some(mut value) = whole {
        let mut power = 0;
        while value % 1024 == 0 && power < 6 {
            value /= 1024;
            power += 1;
        }
        let suffix = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"][power];
        return Ok(format!("{value}{suffix}"));
    }
    // Decimal: trailing zeros into the exponent, the exponent down to a multiple of 3.
    while mantissa % 10 == 0 {
        mantissa /= 10;
        scale += 1;
    }
    match scale.rem_euclid(3) {
        1 => {
            mantissa *= 10;
            scale -= 1;
        }
        2 => {
            mantissa *= 100;
            scale -= 2;
        }
        _ => {}
    }
    let suffix = match format {
        Format::DecimalExponent if scale == 0 => String::new(),
        Format::DecimalExponent => format!("e{scale}"),
        _ => match scale {
            -9 => "n".into(),
            -6 => "u".into(),
            -3 => "m".into(),
            0 => String::new(),
            3 => "k".into(),
            6 => "M".into(),
            9 => "G".into(),
            12 => "T".into(),
            15 => "P".into(),
            18 => "E".into(),
            _ => format!("e{scale}"),
        },
    };
    Ok(format!("{mantissa}{suffix}"))
}

/// Whether `ParseQuantity` keeps the string as written (`quantity.go`, its int64 fast path: the
/// digits without leading zeros fit in 18 (decimal) or the binary precision; then a decimal is
/// kept when its scale is a multiple of 3, its digits do not end in `000` nor start with `0`,
/// and a binary one when its number is not a multiple of 8).
fn kept_as_written(text: &str) -> Result<bool, QuantityError> {
    if text == "0" {
        return Ok(true);
    }
    let (_, digits, fraction, suffix) = split(text)?;
    let digits = digits.trim_start_matches('0');
    let num = if digits.is_empty() { "0" } else { digits };
    let (format, base2, exp10) = interpret(suffix)?;
    let binary = format == Format::BinarySi;
    let (precision, mut scale, mantissa) = if binary {
        if !fraction.is_empty() {
            return Ok(false);
        }
        let precision = 15 - num.len() as i32 - (base2 as f32 * 3.0 / 10.0) as i32 - 1;
        (precision, 0, 1i64 << base2)
    } else {
        (18 - (num.len() + fraction.len()) as i32, exp10, 1)
    };
    if precision < 0 {
        return Ok(false);
    }
    scale -= fraction.len() as i32;
    if scale < -9 {
        return Ok(false);
    }
    let shifted = format!("{num}{fraction}");
    let Ok(value) = shifted.parse::<i64>() else {
        return Ok(false);
    };
    if value.checked_mul(mantissa).is_none() {
        return Ok(false);
    }
    Ok(if binary {
        value & 7 != 0
    } else {
        scale % 3 == 0 && !shifted.ends_with("000") && !shifted.starts_with('0')
    })
}

/// A suffix's format, power of 2 and power of 10 (`Mi` → binary, 20, 0; `m` → decimal, 0, -3;
/// `e3` → exponent, 0, 3).
fn interpret(suffix: &str) -> Result<(Format, u32, i32), QuantityError> {
    const DECIMAL: [(&str, i32); 10] = [
        ("", 0),
        ("n", -9),
        ("u", -6),
        ("m", -3),
        ("k", 3),
        ("M", 6),
        ("G", 9),
        ("T", 12),
        ("P", 15),
        ("E", 18),
    ];
    const BINARY: [(&str, u32); 6] = [
        ("Ki", 10),
        ("Mi", 20),
        ("Gi", 30),
        ("Ti", 40),
        ("Pi", 50),
        ("Ei", 60),
    ];
    if let Some((_, exp)) = DECIMAL.iter().find(|(s, _)| *s == suffix) {
        return Ok((Format::DecimalSi, 0, *exp));
    }
    if let Some((_, exp)) = BINARY.iter().find(|(s, _)| *s == suffix) {
        return Ok((Format::BinarySi, *exp, 0));
    }
    match suffix.strip_prefix(['e', 'E']) {
        Some(exp) if !exp.is_empty() => Ok((
            Format::DecimalExponent,
            0,
            exp.parse().map_err(|_| "bad exponent")?,
        )),
        _ => Err("unknown suffix"),
    }
}

fn pow10(n: i32) -> Result<i128, QuantityError> {
    10i128.checked_pow(n as u32).ok_or("too large")
}

/// Sign, whole digits, fraction digits and suffix (`-1.5Gi` → true, "1", "5", "Gi").
fn split(text: &str) -> Result<(bool, &str, &str, &str), QuantityError> {
    let (negative, rest) = match text.as_bytes().first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text),
    };
    let end = rest
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(rest.len());
    let (number, suffix) = rest.split_at(end);
    let (digits, fraction) = number.split_once('.').unwrap_or((number, ""));
    if digits.is_empty() && fraction.is_empty() {
        return Err("no number");
    }
    if fraction.contains('.') {
        return Err("two decimal points");
    }
    Ok((negative, digits, fraction, suffix))
}

#[cfg(test)]
mod tests {
    use super::canonical;

    #[test]
    fn quantities_take_apimachinery_canonical_forms() {
        for (given, canonical_form) in [
            ("0.5", "500m"),
            ("1000m", "1"),
            ("2000", "2k"),
            ("1e3", "1e3"),
            ("1e4", "10e3"),
            ("1024Mi", "1Gi"),
            ("1536Mi", "1536Mi"),
            ("0.5Gi", "512Mi"),
            ("1.5Ki", "1536"),
            ("0.5Ki", "512"),
            ("0", "0"),
            ("0Mi", "0"),
            ("250u", "250u"),
            ("1.5", "1500m"),
            ("129e6", "129e6"),
            ("128974848", "128974848"),
            ("0.0000000001", "1n"),
            ("-1.5", "-1500m"),
            // Kept as written by Go's fast path.
            ("+1", "+1"),
            ("01", "01"),
            ("1.500", "1.500"),
            ("1E3", "1E3"),
            ("1e+3", "1e+3"),
            ("+1Ki", "+1Ki"),
            ("1Gi", "1Gi"),
            ("2500m", "2500m"),
        ] {
            assert_eq!(canonical(given).unwrap(), canonical_form, "{given}");
        }
        for bad in ["", "m", "1.2.3", "1x", "1e"] {
            assert!(canonical(bad).is_err(), "{bad}");
        }
    }
}
