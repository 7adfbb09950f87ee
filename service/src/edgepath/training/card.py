"""Model card of a primary-path artefact: JSON (machine-readable) and Markdown (for people)."""

from __future__ import annotations

from typing import Any


def _pm(value: float | None, ci: float | None, unit: str = "") -> str:
    if value is None:
        return "—"
    return f"{value:.1f}{unit} ± {ci:.1f}" if ci is not None else f"{value:.1f}{unit}"


def _log_filtering(training: dict[str, Any]) -> str:
    """What was done to the decision log against the user split (empty for cards before it was, or no log)."""
    dropped, unmapped = training.get("logged_decisions_dropped_held_out"), training.get("logged_decisions_unmapped")
    if not dropped and not unmapped:
        return ""
    return (
        f" (of {training.get('logged_decisions_read')} read: {dropped or 0} of held-out users' devices dropped, "
        f"{unmapped or 0} of devices that map to no user of the data kept)"
    )


def render_markdown(card: dict[str, Any]) -> str:
    """The card as Markdown: data and licence, split, features, hyper-parameters, scores, ablation, command."""
    lines = [
        f"# Model card: {card['name']}",
        "",
        f"Primary-path policy of EdgePath, trained offline on {card['trained_at']} and shipped for warm start "
        f"(`edgepath serve --model models/{card['name']}`); online learning continues from it at the edge.",
        "",
        "## Reproduce",
        "",
        "```",
        card["command"],
        "```",
        "",
        "Deterministic: the same command on the same data writes the same scores. Integrity: `SHA256SUMS` "
        "(checked before unpickling; `sha256sum -c SHA256SUMS`).",
        "",
        "## Data and licence",
        "",
    ]
    data = card["data"]
    lines += [
        f"- {data['source']}",
        f"- Licence: {data['licence']}; files: "
        + ", ".join(f"`{f}` (sha256 {h[:12]}…)" for f, h in data["files"].items()),
        f"- Pairing: {data['pairing']}",
        f"- Training situations: {card['training']['situations']} (pairing seed {card['hyper_parameters']['seed']}); "
        f"logged decisions (IPS-weighted): {card['training']['logged_decisions']}" + _log_filtering(card["training"]),
        "",
        "## Split",
        "",
        f"- {card['split']['method']}",
        f"- Train: {card['split']['train']['wifi_tests']} WiFi + {card['split']['train']['cellular_tests']} 4G tests, "
        f"{card['split']['train']['users']} users; test: {card['split']['test']['wifi_tests']} WiFi + "
        f"{card['split']['test']['cellular_tests']} 4G tests, {card['split']['test']['users']} users; "
        f"users in both: {card['split']['shared_users']}",
        "",
        "## Model",
        "",
    ]
    if card.get("reward") == "utility":
        lines += [
            f"- Policy: `{card['hyper_parameters']['policy']}` over arms {card['arms']}: per-arm discounted ridge "
            "regression of the utility in numpy (`edgepath.engines.linear_bandit`), exact propensities; reward = "
            f"{card.get('reward_definition', 'utility')}.",
            "- Warm start: full-information rows of both arms (weight 1) + IPS-weighted decision-log rows "
            "(weight 1/propensity, capped) added to the very statistics the online learner keeps updating "
            "(`PrimaryPathBandit.warm_start_rows`).",
        ]
    else:
        lines += [
            f"- Policy: `{card['hyper_parameters']['policy']}` over arms {card['arms']}, one "
            "`SGDClassifier(loss='log_loss')` oracle per arm, reward = 1[throughput ≥ "
            f"{card['hyper_parameters']['reward_threshold_mbps']} Mbit/s] (the service's Bernoulli reward).",
            "- Oracles: full-information rows of both arms (weight 1) + IPS-weighted decision-log rows "
            "(weight 1/propensity, capped); then handed to the policy (`PrimaryPathBandit.warm_start`).",
        ]
    lines += [
        "- Also shipped: a cost-sensitive better-arm classifier (`offline_classifier`, static).",
        f"- Features: {len(card['features'])} columns of `edgepath.engines.features.context_features` "
        f"(groups: {', '.join(card['feature_groups'])}).",
        "- Hyper-parameters: " + ", ".join(f"{k}={v}" for k, v in card["hyper_parameters"].items()),
        "",
        "## Offline scores on unseen users (static, no online learning)"
        if card["scores"].get("held_out", True)
        else "## Offline scores on the test users, NOT verified held out (static, no online learning)",
        "",
        f"Mean over pairing seeds {card['scores']['seeds']} of the test users' paired situations; ± is the 95% "
        "Student-t half-width over seeds."
        + (f" {card['scores']['held_out_note']}." if not card["scores"].get("held_out", True) else ""),
        "",
        "| model | % of oracle throughput | gain over WiFi-first |",
        "|---|---|---|",
    ]
    for name, sc in card["scores"]["offline"].items():
        lines.append(
            f"| {name} | {_pm(sc['pct_of_oracle'], sc['pct_of_oracle_ci95'], '%')} | "
            f"{_pm(sc['gain_vs_wifi_first_pct'], sc['gain_vs_wifi_first_pct_ci95'], '%')} |"
        )
    lines += [
        "",
        "## Feature ablation (offline score of the greedy oracles when a group is removed)",
        "",
        "| variant | oracles greedy, % of oracle | Δ vs all | better-arm classifier, % of oracle |",
        "|---|---|---|---|",
    ]
    if not card["ablation"]:
        lines.append("| (not run: --no-ablation) | — | — | — |")
    base = card["ablation"][0]["offline_oracles_greedy"]["pct_of_oracle"] if card["ablation"] else 0.0
    for row in card["ablation"]:
        g, c = row["offline_oracles_greedy"], row["offline_classifier"]
        lines.append(
            f"| {row['variant']} | {_pm(g['pct_of_oracle'], g['pct_of_oracle_ci95'], '%')} | "
            f"{g['pct_of_oracle'] - base:+.1f} | {_pm(c['pct_of_oracle'], c['pct_of_oracle_ci95'], '%')} |"
        )
    online = card.get("online_evaluation")
    if online:
        lines += [
            "",
            "## Online evaluation on unseen users (`edgepath eval primary`, learning online)",
            "",
            f"Pairing seeds {online['seeds']}; mean ± 95% Student-t half-width over seeds. Report: "
            f"`{online['report']}`; command:",
            "",
            "```",
            str(online["command"]),
            "```",
            "",
            "| policy | Mbit/s | % of oracle | gain over WiFi-first | 10 MB completion, s |",
            "|---|---|---|---|---|",
        ]
        rows = sorted(online["policies"].items(), key=lambda kv: -kv[1]["mean_throughput_mbps"])
        for name, p in rows:
            lines.append(
                f"| {name} | {_pm(p['mean_throughput_mbps'], p['mean_throughput_mbps_ci95'])} | "
                f"{_pm(p['pct_of_oracle'], p['pct_of_oracle_ci95'], '%')} | "
                f"{_pm(p['gain_vs_wifi_first_pct'], p['gain_vs_wifi_first_pct_ci95'], '%')} | "
                f"{p['mean_completion_time_s_10MB']:.2f} |"
            )
        if online.get("drift"):
            d = online["drift"]
            lines += [
                "",
                f"Drift replay (WiFi outcomes × {d['wifi_factor']} from half-way, contexts unchanged): outcomes until "
                "the rolling-100 LTE share reaches half-way to the post-drift oracle's, per seed.",
                "",
                "| policy | Mbit/s after drift | LTE share after | outcomes to switch |",
                "|---|---|---|---|",
            ]
            for name, p in d["policies"].items():
                lines.append(
                    f"| {name} | {p['mean_throughput_after_mbps']:.1f} | {p['lte_share_after']:.2f} | "
                    f"{p['switch_outcomes_per_seed']} |"
                )
    lines += ["", "## Notes", ""] + [f"- {n}" for n in card.get("notes", [])] + [""]
    return "\n".join(lines)
