"""Stripe's presentment currencies and minimum charge amounts, as docs.stripe.com/currencies
lists them ("Supported presentment currencies", "Minimum and maximum charge amounts",
"Zero-decimal currencies"); amounts are in the currency's minor unit.

The connector's `charge_card` takes only these (`Currency`, `Amount`: checked before the
intent, agentsaga.saga.tool_schema), and the world's stand-in refuses what Stripe refuses. A
currency outside the list is refused (`currency`), as Stripe refuses it. A currency with no listed
minimum must still be worth at least USD 0.50 at the day's rate; the stand-in knows no exchange
rates and checks only that the amount is positive (docs/contracts.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import AfterValidator, Field, WithJsonSchema

_SUPPORTED = """
usd aed afn all amd ang aoa ars aud awg azn bam bbd bdt bgn bhd bif bmd bnd bob brl bsd bwp byn
bzd cad cdf chf clp cny cop crc cve czk djf dkk dop dzd egp etb eur fjd fkp gbp gel gip gmd gnf
gtq gyd hkd hnl htg huf idr ils inr isk jmd jod jpy kes kgs khr kmf krw kwd kyd kzt lak lbp lkr
lrd lsl mad mdl mga mkd mmk mnt mop mur mvr mwk mxn myr mzn nad ngn nio nok npr nzd omr pab pen
pgk php pkr pln pyg qar ron rsd rub rwf sar sbd scr sek sgd shp sle sos srd std szl thb tjs tnd
top try ttd twd tzs uah ugx uyu uzs vnd vuv wst xaf xcd xof xpf yer zar zmw
"""
SUPPORTED = frozenset(_SUPPORTED.split())

ZERO_DECIMAL = frozenset(["bif", "clp", "djf", "gnf", "jpy", "kmf", "krw", "mga", "pyg", "rwf",
                          "ugx", "vnd", "vuv", "xaf", "xof", "xpf"])
THREE_DECIMAL = frozenset(["bhd", "jod", "kwd", "omr", "tnd"])

# currency -> the smallest amount a charge may have, in minor units
MINIMUM: dict[str, int] = {
    "usd": 50, "aed": 200, "aud": 50, "bgn": 100, "brl": 50, "cad": 50, "chf": 50, "czk": 1500,
    "dkk": 250, "eur": 50, "gbp": 30, "hkd": 400, "huf": 17500, "inr": 50, "jpy": 50,
    "mxn": 1000, "myr": 200, "nok": 300, "nzd": 50, "pln": 200, "ron": 200, "sek": 300,
    "sgd": 50, "thb": 1000,
}
MAXIMUM = 99_999_999
"""At most eight digits in the minor unit (Stripe's limit for most currencies)."""


def display(amount: int, currency: str) -> str:
    """`50, "usd"` -> `$0.50 usd`, as Stripe words amounts in its errors."""
    if currency in ZERO_DECIMAL:
        major = str(amount)
    elif currency in THREE_DECIMAL:
        major = f"{amount / 1000:.3f}"
    else:
        major = f"{amount / 100:.2f}"
    symbol = {"usd": "$", "eur": "€", "gbp": "£", "jpy": "¥"}.get(currency, "")
    return f"{symbol}{major} {currency}"


def supported(currency: str) -> str:
    """A currency code Stripe takes for a charge, as it must be spelled: lowercase ISO 4217."""
    if currency not in SUPPORTED:
        hint = (f"; write it in lowercase: {currency.lower()!r}"
                if currency.lower() in SUPPORTED else "")
        raise ValueError(f"{currency!r} is not one of Stripe's supported currencies{hint}")
    return currency


Currency = Annotated[str, AfterValidator(supported), WithJsonSchema({
    "type": "string", "enum": sorted(SUPPORTED),
    "description": "a currency Stripe supports, lowercase ISO 4217 (usd, eur, gbp, ...)"})]
"""A charge's currency: one of Stripe's supported presentment currencies, lowercase."""


def at_least_the_minimum(args: Mapping[str, Any]) -> None:
    """A charge's `amount` against the minimum of its `currency` (usd when none is given):
    below it Stripe refuses the charge, so it is refused before the intent, with the minimum."""
    amount, currency = args.get("amount"), args.get("currency", "usd")
    minimum = MINIMUM.get(str(currency))
    if isinstance(amount, int) and minimum is not None and amount < minimum:
        raise ValueError(
            f"argument 'amount' must be at least {minimum} for {currency} "
            f"({display(minimum, str(currency))}, Stripe's minimum charge), got {amount}")


Amount = Annotated[int, Field(ge=1, le=MAXIMUM, description=(
    "in the currency's smallest unit (cents for usd, yen for jpy), at least Stripe's minimum "
    "for the currency (usd 50)"))]
"""A charge's amount: an integer of the currency's smallest unit; below the currency's minimum
(`at_least_the_minimum`, checked with the currency) the charge is refused before the intent."""
