//! The primary-path bandit's context features: a device's interfaces → the fixed feature vector.
//!
//! The reference is `edgepath.engines.features.context_features` (service/src), whose module docstring gives the
//! layout and the transforms (Alzadjali et al., Table I, extended with the mobilebandwidth data's columns). This
//! module computes the same vector **bit for bit**: the same operations in the same order, `log10`, `log2` and
//! `pow` from the C library as `math.log10`, `math.log2` and Python's `**`, `max`/`min` with Python's argument
//! order. Where Python would raise (`10.0 ** (sinr / 10)` overflowing, which the service's validation rules out)
//! it returns `None` and the Python encoder decides. `tests/service/engines/test_features_native.py` holds the two
//! to the same bits and the same layout.

use std::hint::black_box;

use crate::pyfloat::{py_max, py_min};

/// The measurements of one interface this module reads, in this order (`InterfaceContext`'s field names).
pub const ATTRS: [&str; 14] = [
    "wifi_rssi_dbm",
    "link_speed_mbps",
    "frequency_mhz",
    "rsrp_dbm",
    "rsrq_db",
    "sinr_db",
    "cqi",
    "cell_rssi_dbm",
    "rtt_ms",
    "loss",
    "wifi_rssi_spread_db",
    "max_link_speed_mbps",
    "rsrp_spread_db",
    "channel_bandwidth_mhz",
];
const WIFI_RSSI: usize = 0;
const LINK_SPEED: usize = 1;
const FREQUENCY: usize = 2;
const RSRP: usize = 3;
const SINR: usize = 5;
const CHANNEL_BANDWIDTH: usize = 13;

/// The access-type slots, in the order of `SLOTS`: WiFi, LTE, NR, Ethernet.
pub const SLOTS: [&str; 4] = ["wifi", "lte", "nr", "ethernet"];
const WIFI: usize = 0;
const ETHERNET: usize = 3;

/// Values are clipped to ±`CLIP` after their transform (`_CLIP`).
const CLIP: f64 = 5.0;

/// One interface: its slot (index into `SLOTS`) and its measurements in `ATTRS` order (`None`: not reported).
#[derive(Debug, Clone, Copy)]
pub struct Interface {
    pub slot: usize,
    pub measured: [Option<f64>; 14],
}

#[derive(Debug, Clone, Copy)]
enum Raw {
    Attr(usize),
    /// `frequency_mhz / 1000` (`_carrier_ghz`).
    CarrierGhz,
    /// `B · log2(1 + 10^(SINR/10))`, B in MHz (`_shannon_capacity_mbps`; Shannon 1948, eq. 21).
    ShannonMbps,
}

#[derive(Debug, Clone, Copy)]
enum Transform {
    /// `(x − centre) / scale`.
    Lin(f64, f64),
    /// `(log10(1 + max(x, 0)) − centre) / scale`.
    Log(f64, f64),
    /// 1 for a 5/6 GHz carrier (`frequency_mhz ≥ 4900`), else 0.
    Band,
}

type Spec = (&'static str, Raw, Transform);

const PATH: [Spec; 2] = [
    ("rtt_ms", Raw::Attr(8), Transform::Log(1.7, 0.5)),
    ("loss", Raw::Attr(9), Transform::Lin(0.02, 0.05)),
];
const WIFI_SPECS: [Spec; 7] = [
    ("wifi_rssi_dbm", Raw::Attr(WIFI_RSSI), Transform::Lin(-65.0, 10.0)),
    ("wifi_rssi_spread_db", Raw::Attr(10), Transform::Lin(1.0, 2.0)),
    ("link_speed_mbps", Raw::Attr(LINK_SPEED), Transform::Log(2.0, 0.5)),
    ("max_link_speed_mbps", Raw::Attr(11), Transform::Log(2.2, 0.3)),
    ("band_5ghz", Raw::Attr(FREQUENCY), Transform::Band),
    PATH[0],
    PATH[1],
];
const CELL_SPECS: [Spec; 11] = [
    ("rsrp_dbm", Raw::Attr(RSRP), Transform::Lin(-95.0, 15.0)),
    ("rsrq_db", Raw::Attr(4), Transform::Lin(-11.0, 4.0)),
    ("sinr_db", Raw::Attr(SINR), Transform::Lin(10.0, 8.0)),
    ("cqi", Raw::Attr(6), Transform::Lin(8.0, 4.0)),
    ("cell_rssi_dbm", Raw::Attr(7), Transform::Lin(-75.0, 15.0)),
    ("rsrp_spread_db", Raw::Attr(12), Transform::Lin(1.0, 2.0)),
    ("carrier_ghz", Raw::CarrierGhz, Transform::Lin(1.8, 0.6)),
    (
        "channel_bandwidth_mhz",
        Raw::Attr(CHANNEL_BANDWIDTH),
        Transform::Lin(15.0, 5.0),
    ),
    ("shannon_capacity_mbps", Raw::ShannonMbps, Transform::Log(1.8, 0.5)),
    PATH[0],
    PATH[1],
];
const ETHERNET_SPECS: [Spec; 3] = [
    ("link_speed_mbps", Raw::Attr(LINK_SPEED), Transform::Log(2.0, 0.5)),
    PATH[0],
    PATH[1],
];

fn slot_specs(slot: usize) -> &'static [Spec] {
    match slot {
        WIFI => &WIFI_SPECS,
        ETHERNET => &ETHERNET_SPECS,
        _ => &CELL_SPECS,
    }
}

/// Length of the feature vector (`N_FEATURES`): per slot a present flag and a (value, missing) pair per feature.
pub const N_FEATURES: usize = 4 + 2 * (WIFI_SPECS.len() + 2 * CELL_SPECS.len() + ETHERNET_SPECS.len());

/// The column names (`FEATURE_NAMES`): `<slot>.present`, then per feature `<slot>.<feature>` and
/// `<slot>.<feature>.missing`.
pub fn feature_names() -> Vec<String> {
    let mut names = Vec::with_capacity(N_FEATURES);
    for (slot, prefix) in SLOTS.iter().enumerate() {
        names.push(format!("{prefix}.present"));
        for (name, _, _) in slot_specs(slot) {
            names.push(format!("{prefix}.{name}"));
            names.push(format!("{prefix}.{name}.missing"));
        }
    }
    names
}

/// Python's `10.0 ** y` for finite or NaN `y`: `None` where Python raises `OverflowError` (an infinite result).
/// The base goes through `black_box` so that the compiler keeps the C library's `pow` rather than an `exp10`.
fn pow10(y: f64) -> Option<f64> {
    if y == 0.0 {
        return Some(1.0); // float_pow's special case
    }
    let v = black_box(10.0_f64).powf(y);
    (!v.is_infinite()).then_some(v)
}

/// The raw value of one feature of `iface` (`None`: missing); `Err` where Python raises.
fn raw(iface: &Interface, what: Raw) -> Result<Option<f64>, ()> {
    let m = &iface.measured;
    Ok(match what {
        Raw::Attr(i) => m[i],
        Raw::CarrierGhz => m[FREQUENCY].map(|f| f / 1000.0),
        Raw::ShannonMbps => match (m[CHANNEL_BANDWIDTH], m[SINR]) {
            (Some(b), Some(sinr)) => Some(b * (1.0 + pow10(sinr / 10.0).ok_or(())?).log2()),
            _ => None,
        },
    })
}

fn transform(t: Transform, x: f64) -> f64 {
    match t {
        Transform::Lin(centre, scale) => (x - centre) / scale,
        Transform::Log(centre, scale) => ((1.0 + py_max(x, 0.0)).log10() - centre) / scale,
        Transform::Band => {
            if x >= 4900.0 {
                1.0
            } else {
                0.0
            }
        }
    }
}

/// The interface standing for each slot (`_representatives`): the strongest signal (WiFi RSSI for WiFi, RSRP
/// for LTE and NR, link speed for Ethernet; none reported ranks last), the first listed of equals. Shape (4,):
/// an index into `interfaces`, `None` where the device has no interface of that slot.
pub fn representatives(interfaces: &[Interface]) -> [Option<usize>; 4] {
    let mut best: [Option<(f64, usize)>; 4] = [None; 4];
    for (i, iface) in interfaces.iter().enumerate() {
        let value = match iface.slot {
            WIFI => iface.measured[WIFI_RSSI],
            ETHERNET => iface.measured[LINK_SPEED],
            _ => iface.measured[RSRP],
        };
        let strength = value.unwrap_or(f64::NEG_INFINITY);
        let held = &mut best[iface.slot];
        if held.is_none_or(|(s, _)| strength > s) {
            *held = Some((strength, i));
        }
    }
    best.map(|b| b.map(|(_, i)| i))
}

/// `context_features(interfaces)`: shape (`N_FEATURES`,), and the representative per slot
/// (`representatives`). `None` where the Python encoder must decide (a `10 ** (SINR / 10)` overflow).
pub fn context_features(interfaces: &[Interface]) -> Option<(Vec<f64>, [Option<usize>; 4])> {
    let reps = representatives(interfaces);
    let mut out = vec![0.0; N_FEATURES];
    let mut k = 0;
    for (slot, rep) in reps.iter().enumerate() {
        let iface = rep.map(|i| &interfaces[i]);
        out[k] = if iface.is_some() { 1.0 } else { 0.0 };
        k += 1;
        for &(_, what, t) in slot_specs(slot) {
            let value = match iface {
                Some(iface) => raw(iface, what).ok()?,
                None => None,
            };
            match value {
                Some(x) if x.is_finite() => {
                    let v = transform(t, x);
                    out[k] = if v.is_finite() {
                        py_min(py_max(v, -CLIP), CLIP)
                    } else {
                        0.0
                    };
                }
                _ => out[k + 1] = 1.0,
            }
            k += 2;
        }
    }
    Some((out, reps))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn iface(slot: usize, pairs: &[(usize, f64)]) -> Interface {
        let mut measured = [None; 14];
        for &(i, v) in pairs {
            measured[i] = Some(v);
        }
        Interface { slot, measured }
    }

    #[test]
    fn layout_has_a_name_per_column() {
        assert_eq!(feature_names().len(), N_FEATURES);
        assert_eq!(N_FEATURES, 68);
        assert_eq!(feature_names()[0], "wifi.present");
        assert_eq!(feature_names()[N_FEATURES - 1], "ethernet.loss.missing");
    }

    #[test]
    fn an_absent_slot_is_all_missing() {
        let (x, reps) = context_features(&[iface(WIFI, &[(WIFI_RSSI, -65.0)])]).unwrap();
        assert_eq!(reps, [Some(0), None, None, None]);
        assert_eq!(x[0], 1.0);
        assert_eq!((x[1], x[2]), (0.0, 0.0)); // RSSI at the centre, reported
        assert_eq!((x[3], x[4]), (0.0, 1.0)); // spread missing
        assert_eq!(x[15], 0.0); // LTE absent
        assert!(x[16..38].chunks(2).all(|p| p == [0.0, 1.0]));
    }

    #[test]
    fn the_strongest_interface_stands_for_its_slot_first_of_equals() {
        let ifaces = [
            iface(1, &[(RSRP, -100.0)]),
            iface(1, &[(RSRP, -90.0)]),
            iface(1, &[(RSRP, -90.0)]),
            iface(1, &[]),
        ];
        assert_eq!(representatives(&ifaces), [None, Some(1), None, None]);
    }

    #[test]
    fn values_are_clipped_and_an_overflowing_power_is_handed_back() {
        let (x, _) = context_features(&[iface(WIFI, &[(LINK_SPEED, 1e300)])]).unwrap();
        assert_eq!(x[5], 5.0);
        assert!(context_features(&[iface(1, &[(SINR, 4000.0), (CHANNEL_BANDWIDTH, 20.0)])]).is_none());
    }
}
