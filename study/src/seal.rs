//! Signatures of what `freeze` decided: Ed25519 (RFC 8032) over the frozen decisions' bytes, with a
//! key pair the evaluator makes (`serverbench keygen`) and keeps. `freeze` signs with the private key;
//! `verify` checks with the public key alone, given apart from the frozen file, so a candidate who can
//! edit the file cannot re-seal it. Keys travel as lowercase hex text. Never reads or writes files.

use ed25519_dalek::{Signature, Signer, SigningKey, Verifier, VerifyingKey};

/// Why a key or a signature was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SealError {
    /// The text is not a key of this kind.
    #[error("not an Ed25519 {0} key: expected {1} hexadecimal digits")]
    Key(&'static str, usize),
    /// The signature is not 128 hexadecimal digits.
    #[error("the signature is not 128 hexadecimal digits")]
    Malformed,
    /// The signature does not match these bytes under this public key.
    #[error("the signature does not match the decisions under this public key: they were edited after `freeze`, or signed with another key")]
    Mismatch,
    /// The operating system gave no random bytes for a new key.
    #[error("no random bytes from the operating system: {0}")]
    Random(String),
}

/// A new key pair: `(private, public)`, each as hex (64 digits).
pub fn new_key_pair() -> Result<(String, String), SealError> {
    let mut secret = [0u8; 32];
    getrandom::fill(&mut secret).map_err(|e| SealError::Random(e.to_string()))?;
    let key = SigningKey::from_bytes(&secret);
    Ok((hex(&secret), hex(key.verifying_key().as_bytes())))
}

/// The public key of a private one, as hex.
pub fn public_of(private_hex: &str) -> Result<String, SealError> {
    let key = signing_key(private_hex)?;
    Ok(hex(key.verifying_key().as_bytes()))
}

/// The signature of `bytes` under the private key, as hex (128 digits).
pub fn sign(private_hex: &str, bytes: &[u8]) -> Result<String, SealError> {
    Ok(hex(&signing_key(private_hex)?.sign(bytes).to_bytes()))
}

/// Checks `signature_hex` over `bytes` under `public_hex` (strictly: no malleable signatures, no weak
/// keys).
pub fn check(public_hex: &str, bytes: &[u8], signature_hex: &str) -> Result<(), SealError> {
    let public: [u8; 32] = unhex(public_hex).ok_or(SealError::Key("public", 64))?;
    let key = VerifyingKey::from_bytes(&public).map_err(|_| SealError::Key("public", 64))?;
    let sig: [u8; 64] = unhex(signature_hex).ok_or(SealError::Malformed)?;
    key.verify_strict(bytes, &Signature::from_bytes(&sig))
        .map_err(|_| SealError::Mismatch)?;
    // `verify_strict` refuses what plain `verify` lets through; plain `verify` must agree.
    key.verify(bytes, &Signature::from_bytes(&sig))
        .map_err(|_| SealError::Mismatch)
}

fn signing_key(private_hex: &str) -> Result<SigningKey, SealError> {
    let secret: [u8; 32] = unhex(private_hex).ok_or(SealError::Key("private", 64))?;
    Ok(SigningKey::from_bytes(&secret))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// `N` bytes from exactly `2N` hexadecimal digits (surrounding whitespace ignored).
fn unhex<const N: usize>(text: &str) -> Option<[u8; N]> {
    let text = text.trim();
    if text.len() != 2 * N || !text.is_ascii() {
        return None;
    }
    let mut out = [0u8; N];
    for (i, b) in out.iter_mut().enumerate() {
        *b = u8::from_str_radix(&text[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 8032, section 7.1, test 2: the one-byte message 0x72.
    const SECRET: &str = "4ccd089b28ff96da9db6c346ec114e0f5b8a319f35aba624da8cf6ed4fb8a6fb";
    const PUBLIC: &str = "3d4017c3e843895a92b70aa74d1b7ebc9c982ccf2ec4968cc0cd55f12af4660c";
    const SIGNATURE: &str = "92a009a9f0d4cab8720e820b5f642540a2b27b5416503f8fb3762223ebdb69da085ac1e43e15996e458f3613d0f11d8c387b2eaeb4302aeeb00d291612bb0c00";

    #[test]
    fn the_rfc_8032_vector_signs_and_checks() {
        assert_eq!(public_of(SECRET).unwrap(), PUBLIC);
        assert_eq!(sign(SECRET, &[0x72]).unwrap(), SIGNATURE);
        assert_eq!(check(PUBLIC, &[0x72], SIGNATURE), Ok(()));
    }

    #[test]
    fn an_edit_a_new_key_or_a_bad_text_is_refused() {
        let (private, public) = new_key_pair().unwrap();
        let sig = sign(&private, b"decisions").unwrap();
        assert_eq!(check(&public, b"decisions", &sig), Ok(()));
        assert_eq!(check(&public, b"decisionz", &sig), Err(SealError::Mismatch));
        assert_eq!(check(PUBLIC, b"decisions", &sig), Err(SealError::Mismatch));
        let (other, _) = new_key_pair().unwrap();
        assert_ne!(other, private, "two new keys differ");
        let mut flipped = sig.clone().into_bytes();
        flipped[0] = if flipped[0] == b'0' { b'1' } else { b'0' };
        let flipped = String::from_utf8(flipped).unwrap();
        assert_eq!(
            check(&public, b"decisions", &flipped),
            Err(SealError::Mismatch)
        );
        assert_eq!(
            check(&public, b"decisions", "00"),
            Err(SealError::Malformed)
        );
        assert_eq!(
            check("zz", b"decisions", &sig),
            Err(SealError::Key("public", 64))
        );
        assert!(matches!(
            sign("abc", b"x"),
            Err(SealError::Key("private", 64))
        ));
    }
}
