//! Every user string that reaches generated C goes through this module:
//! [`c_string`] for string literals (error messages, source locations,
//! paths), [`c_comment`] for text inside `/* */` comments (paths, entry
//! names, types), [`mangle`] for the exported function names of
//! `arden build` and [`local_name`] for the parameter names of its wrappers.
//! None of them can end a comment or a literal, start a preprocessor line,
//! splice lines, form a trigraph or collide with a C keyword, a libc name or
//! a name of the generated code.

use std::fmt::Write;

/// A C string literal (with its quotes) whose bytes are those of `s`:
/// printable ASCII as is except `"`, `\` and `?` (no trigraph can form),
/// every other byte (newlines, NUL, UTF-8) as a three-digit octal escape.
pub fn c_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for b in s.bytes() {
        match b {
            b'"' => out.push_str("\\\""),
            b'\\' => out.push_str("\\\\"),
            b'?' => out.push_str("\\?"),
            0x20..=0x7e => out.push(b as char),
            // always three digits: a digit that follows is not read into it
            _ => {
                let _ = write!(out, "\\{b:03o}");
            }
        }
    }
    out.push('"');
    out
}

/// `s` as text for the inside of a `/* */` comment, readable and unable to
/// leave it: `\` becomes `\\`; a `/` that starts the text or follows a
/// `*` becomes `\/`, a `*` that starts the text or follows a `/` becomes
/// `\*`, and a last `/` or `*` becomes `\u{2f}` or `\u{2a}` (no `*/` or
/// `/*`, whatever surrounds the text); `??` becomes `?\?`; line
/// breaks, tabs and other control characters, and non-ASCII characters
/// other than letters and digits (bidirectional controls, invisible
/// characters) become `\n`, `\t` or `\u{HEX}`. The result is one line of
/// printable ASCII and letters.
pub fn c_comment(s: &str) -> String {
    let chars: Vec<char> = s.chars().collect();
    let mut out = String::with_capacity(s.len());
    for (i, &c) in chars.iter().enumerate() {
        let prev = if i == 0 { None } else { Some(chars[i - 1]) };
        let last = i + 1 == chars.len();
        match c {
            '\\' => out.push_str("\\\\"),
            // a backslash between the two characters breaks `*/` and `/*`;
            // the last character is written as a code (what follows the
            // text could be either)
            '/' if last => out.push_str("\\u{2f}"),
            '*' if last => out.push_str("\\u{2a}"),
            '/' if i == 0 || prev == Some('*') => out.push_str("\\/"),
            '*' if i == 0 || prev == Some('/') => out.push_str("\\*"),
            '?' if prev == Some('?') => out.push_str("\\?"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            ' '..='~' => out.push(c),
            c if !c.is_ascii() && c.is_alphanumeric() => out.push(c),
            c => {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
        }
    }
    out
}

/// Names of the library itself that an entry's exported name must not take
/// (`PREFIXfree` frees results).
const LIBRARY_NAMES: &[&str] = &["free"];

/// The part of an exported C name that comes from an entry's name: injective
/// (two different names never give the same text) and a valid identifier
/// tail. A name of ASCII letters, digits and `_` that does not start with a
/// digit (every arden name without a prime) is kept as it is, except the
/// library's own names (`free`); any other name becomes `0` followed by the
/// name with `_` written `_u`, `'` written `_p` and any other character
/// written `_x{HEX}_`: `f'` is `0f_p`, `f_'` is `0f_u_p`, `free` is `0free`.
/// Kept names never start with a digit and encoded ones always do; the
/// encoding is decodable (after `_` comes `u`, `p` or `x`), so the mapping
/// is one-to-one.
pub fn mangle(name: &str) -> String {
    let plain = !name.is_empty()
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !LIBRARY_NAMES.contains(&name);
    if plain {
        return name.to_string();
    }
    let mut out = String::from("0");
    for c in name.chars() {
        match c {
            '_' => out.push_str("_u"),
            '\'' => out.push_str("_p"),
            c if c.is_ascii_alphanumeric() => out.push(c),
            c => {
                let _ = write!(out, "_x{:x}_", c as u32);
            }
        }
    }
    out
}

/// A wrapper parameter's C name: `tag` (`s0` for the first size parameter,
/// `a2` for the third parameter; unique within a wrapper and never a C,
/// libc or wrapper name), `_`, then the arden name made an identifier tail
/// (`'` written `_p`) for the reader, then the tuple path (`_0_1`). The tag
/// makes it unique; the name is only for the reader.
pub fn local_name(tag: &str, name: &str, path: &[usize]) -> String {
    let mut out = format!("{tag}_");
    for c in name.chars() {
        match c {
            '\'' => out.push_str("_p"),
            c if c.is_ascii_alphanumeric() || c == '_' => out.push(c),
            _ => out.push('_'),
        }
    }
    for i in path {
        let _ = write!(out, "_{i}");
    }
    out
}

/// C and C++ keywords, and names a C implementation defines as macros or
/// types that `mangle` with a prefix could spell.
const KEYWORDS: &[&str] = &[
    "auto",
    "break",
    "case",
    "char",
    "const",
    "continue",
    "default",
    "do",
    "double",
    "else",
    "enum",
    "extern",
    "float",
    "for",
    "goto",
    "if",
    "inline",
    "int",
    "long",
    "register",
    "restrict",
    "return",
    "short",
    "signed",
    "sizeof",
    "static",
    "struct",
    "switch",
    "typedef",
    "union",
    "unsigned",
    "void",
    "volatile",
    "while",
    "asm",
    "typeof",
    "bool",
    "true",
    "false",
    "class",
    "delete",
    "new",
    "namespace",
    "template",
    "this",
    "throw",
    "try",
    "catch",
    "virtual",
    "public",
    "private",
    "protected",
    "operator",
    "friend",
    "using",
    "typename",
    "explicit",
    "mutable",
    "nullptr",
    "noexcept",
    "decltype",
    "constexpr",
    "alignas",
    "alignof",
    "static_assert",
    "thread_local",
    "errno",
    "NULL",
    "INFINITY",
    "NAN",
    "EOF",
    "assert",
    "complex",
    "imaginary",
    "main",
];

/// The functions, macros and types of the C library headers that a
/// library or its caller includes (C99 `<stdio.h>`, `<stdlib.h>`,
/// `<string.h>`, `<math.h>`, `<ctype.h>`, `<errno.h>`, `<time.h>`,
/// `<signal.h>`, `<setjmp.h>`, `<locale.h>`, `<stdint.h>`, `<stddef.h>`,
/// `<limits.h>`, `<float.h>`, `<assert.h>` and common POSIX ones): an
/// exported name must not redeclare one. Names the generated code itself
/// uses are found by [`identifiers`].
const LIBC: &str = "printf fprintf sprintf snprintf vprintf vfprintf vsprintf vsnprintf scanf fscanf sscanf vscanf vfscanf vsscanf \
fopen freopen fclose fflush fread fwrite fgetc fgets fputc fputs getc getchar gets putc putchar puts ungetc fseek ftell rewind fgetpos \
fsetpos clearerr feof ferror perror remove rename tmpfile tmpnam setbuf setvbuf fileno popen pclose getline getdelim dprintf fdopen \
FILE fpos_t stdin stdout stderr EOF BUFSIZ FILENAME_MAX SEEK_SET SEEK_CUR SEEK_END \
malloc calloc realloc free aligned_alloc posix_memalign abort exit atexit quick_exit at_quick_exit getenv setenv unsetenv system \
atoi atol atoll atof strtol strtoll strtoul strtoull strtod strtof strtold abs labs llabs div ldiv lldiv rand srand random srandom \
qsort bsearch mblen mbtowc wctomb mbstowcs wcstombs div_t ldiv_t lldiv_t RAND_MAX EXIT_SUCCESS EXIT_FAILURE MB_CUR_MAX \
memcpy memmove memset memcmp memchr strcpy strncpy strcat strncat strcmp strncmp strcoll strxfrm strchr strrchr strstr strspn \
strcspn strpbrk strtok strtok_r strlen strnlen strerror strdup strndup strerror_r stpcpy strsep strcasecmp strncasecmp \
acos asin atan atan2 cos sin tan acosh asinh atanh cosh sinh tanh exp exp2 expm1 frexp ldexp log log10 log1p log2 logb ilogb \
modf scalbn scalbln cbrt fabs hypot pow sqrt erf erfc lgamma tgamma ceil floor nearbyint rint lrint llrint round lround llround \
trunc fmod remainder remquo copysign nan nextafter nexttoward fdim fmax fmin fma isnan isinf isfinite isnormal signbit \
fpclassify isgreater isless islessequal isgreaterequal islessgreater isunordered HUGE_VAL INFINITY NAN M_PI M_E double_t float_t \
expf logf sqrtf powf fabsf sinf cosf tanhf floorf ceilf roundf fmaxf fminf sincos j0 j1 jn y0 y1 yn gamma drem finite \
isalnum isalpha isblank iscntrl isdigit isgraph islower isprint ispunct isspace isupper isxdigit tolower toupper isascii toascii \
errno EDOM ERANGE EILSEQ EINVAL ENOMEM EAGAIN \
time clock difftime mktime asctime ctime gmtime localtime strftime time_t clock_t tm timespec CLOCKS_PER_SEC \
signal raise sig_atomic_t setjmp longjmp jmp_buf setlocale localeconv va_list va_start va_end va_arg va_copy \
int8_t int16_t int32_t int64_t uint8_t uint16_t uint32_t uint64_t intptr_t uintptr_t intmax_t uintmax_t size_t ptrdiff_t \
ssize_t off_t wchar_t max_align_t offsetof NULL bool true false CHAR_BIT INT_MAX INT_MIN LONG_MAX LONG_MIN DBL_MAX DBL_MIN DBL_EPSILON \
FLT_MAX FLT_MIN FLT_EPSILON SIZE_MAX assert static_assert \
read write open close lseek pipe fork exec execv execvp wait waitpid kill sleep usleep getpid alarm pause dup dup2 unlink access \
mmap munmap mprotect select poll socket bind listen accept connect send recv index rindex bzero bcopy ffs";

/// Check a `--prefix` for exported names: a C identifier that does not
/// start with `_` (reserved to the C implementation) or with `ard_`
/// (the generated code's own names).
pub fn check_prefix(p: &str) -> Result<(), String> {
    let ident = p.starts_with(|c: char| c.is_ascii_alphabetic()) && p.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if !ident {
        return Err(format!("invalid --prefix `{}`: it must be a C identifier (ASCII letters, digits and `_`) that starts with a letter", p.escape_default()));
    }
    if p.to_ascii_lowercase().starts_with("ard_") {
        return Err(format!("invalid --prefix `{p}`: names starting with `ard_` are the generated code's own"));
    }
    Ok(())
}

/// Why an exported name `name` (prefix and mangled entry name) would not
/// be the library's own, or `None`: a keyword, a reserved name, or a name
/// that the generated C already uses (`used`: its identifiers).
pub fn clash(name: &str, used: &std::collections::HashSet<&str>) -> Option<String> {
    if KEYWORDS.contains(&name) {
        Some("is a C or C++ keyword or a standard macro".into())
    } else if name.starts_with('_') || name.to_ascii_lowercase().starts_with("ard_") {
        Some("is reserved (to the C implementation or to the generated code)".into())
    } else if LIBC.split_whitespace().any(|w| w == name) {
        Some("is a name of the C library".into())
    } else if ["omp_", "pthread_", "posix_"].iter().any(|p| name.starts_with(p)) {
        Some("is in the namespace of OpenMP or POSIX".into())
    } else if used.contains(name) {
        Some("is a name that the generated C uses (the runtime or the C library)".into())
    } else {
        None
    }
}

/// The identifiers of C source text (outside comments and literals, or
/// inside: a superset is fine for [`clash`]).
pub fn identifiers(src: &str) -> std::collections::HashSet<&str> {
    let b = src.as_bytes();
    let mut out = std::collections::HashSet::new();
    let mut i = 0;
    while i < b.len() {
        if b[i].is_ascii_alphabetic() || b[i] == b'_' {
            let s = i;
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                i += 1;
            }
            out.insert(&src[s..i]);
        } else if b[i].is_ascii_digit() {
            // a number, with its suffix (`1e5f`, `0x1p3`) is not a name
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_' || b[i] == b'.') {
                i += 1;
            }
        } else {
            i += 1;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOSTILE: &[&str] = &[
        "*/",
        "/*",
        "*/ int x; /*",
        "a*/b",
        "\n#include <stdio.h>\n",
        "\"",
        "\\",
        "\\\n",
        "??/",
        "??/\n",
        "???/",
        "a\0b",
        "x\r\ny",
        "é∀",
        "\u{202e}evil\u{202c}",
        "\u{fffd}",
        "*",
        "/",
        "**//",
        "/**/",
        "\t",
        "%s%n",
        "'",
        "//",
        "*\\\n/",
    ];

    /// Undo `c_string`'s escapes (the C compiler's reading of the literal).
    fn read_literal(lit: &str) -> Vec<u8> {
        assert!(lit.starts_with('"') && lit.ends_with('"') && lit.len() >= 2, "{lit}");
        let b = &lit.as_bytes()[1..lit.len() - 1];
        let mut out = vec![];
        let mut i = 0;
        while i < b.len() {
            assert!((0x20..0x7f).contains(&b[i]), "raw byte {} in {lit}", b[i]);
            assert!(b[i] != b'"', "unescaped quote in {lit}");
            if b[i] == b'?' {
                panic!("raw `?` (trigraph risk) in {lit}");
            }
            if b[i] != b'\\' {
                out.push(b[i]);
                i += 1;
                continue;
            }
            match b[i + 1] {
                b'"' | b'\\' | b'?' => {
                    out.push(b[i + 1]);
                    i += 2;
                }
                b'0'..=b'7' => {
                    let d = std::str::from_utf8(&b[i + 1..i + 4]).unwrap();
                    out.push(u8::from_str_radix(d, 8).unwrap());
                    i += 4;
                }
                x => panic!("unknown escape {x} in {lit}"),
            }
        }
        out
    }

    #[test]
    fn string_literals_round_trip_hostile_strings() {
        for s in HOSTILE {
            let lit = c_string(s);
            assert_eq!(read_literal(&lit), s.as_bytes(), "{s:?} -> {lit}");
            assert!(!lit.contains('\n') && !lit.contains("??"), "{lit}");
        }
        // an octal escape followed by a digit stays three digits
        assert_eq!(c_string("\n1"), "\"\\0121\"");
    }

    #[test]
    fn comments_cannot_be_left() {
        for s in HOSTILE {
            let t = c_comment(s);
            for ctx in [format!("/* {t} */"), format!("/*{t}*/"), format!("/* a{t}*b */"), format!("/* x */{t}")] {
                let body = &ctx[2..ctx.len() - 2];
                if ctx.starts_with("/*") && ctx.ends_with("*/") {
                    assert!(!body.contains("*/") && !body.contains("/*"), "{s:?} -> {ctx}");
                }
            }
            assert!(!t.contains("*/") && !t.contains("/*"), "{s:?} -> {t}");
            assert!(!t.starts_with(['/', '*']) && !t.ends_with(['/', '*']), "{s:?} -> {t}");
            assert!(!t.contains('\n') && !t.contains('\r') && !t.contains('\0') && !t.contains("??"), "{s:?} -> {t}");
            assert!(!t.contains('\u{202e}'), "{s:?} -> {t}");
            assert!(t.chars().all(|c| (' '..='~').contains(&c) || c.is_alphanumeric()), "{s:?} -> {t}");
        }
        assert_eq!(c_comment("a*/b.ard"), "a*\\/b.ard");
        assert_eq!(c_comment("dir/model.ard"), "dir/model.ard");
        assert_eq!(c_comment("[n*m]f64"), "[n*m]f64");
        assert_eq!(c_comment("a\nb"), "a\\nb");
    }

    #[test]
    fn mangling_is_injective_and_gives_identifiers() {
        let names = [
            "f",
            "f'",
            "f_",
            "f''",
            "f_'",
            "f'_",
            "f__",
            "f_p",
            "f_u",
            "f_up",
            "0f_p",
            "free",
            "free'",
            "_",
            "_'",
            "'",
            "x_0",
            "x",
            "a_p_u",
            "a'p",
            "a_pp",
            "a'_p",
            "a_p'",
            "memset",
            "int",
            "arden_free",
            "v1",
        ];
        let mut seen = std::collections::HashMap::new();
        for n in names {
            let m = mangle(n);
            assert!(m.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') && !m.is_empty(), "{n} -> {m}");
            if let Some(other) = seen.insert(m.clone(), n) {
                panic!("`{n}` and `{other}` both mangle to {m}");
            }
        }
        assert_eq!(mangle("f'"), "0f_p");
        assert_eq!(mangle("f_"), "f_");
        assert_eq!(mangle("grad_sq"), "grad_sq");
        assert_eq!(mangle("free"), "0free");
        // exhaustive over short names of the alphabet
        let alphabet = ['a', 'p', 'u', 'x', '0', '_', '\''];
        let mut all = vec![String::new()];
        let mut seen = std::collections::HashMap::new();
        for _ in 0..4 {
            all = all.iter().flat_map(|s| alphabet.iter().map(move |c| format!("{s}{c}"))).collect();
            for n in &all {
                if let Some(other) = seen.insert(mangle(n), n.clone()) {
                    panic!("`{n}` and `{other}` both mangle to {}", mangle(n));
                }
            }
        }
    }

    #[test]
    fn prefixes_are_checked() {
        assert!(check_prefix("arden_").is_ok());
        assert!(check_prefix("mylib").is_ok());
        for bad in ["", "_x", "1a", "a-b", "a b", "ard_", "ARD_x", "a*/", "é"] {
            assert!(check_prefix(bad).is_err(), "{bad}");
        }
        let used = identifiers("static void *ard_x = malloc(3e5f); int y1;");
        assert!(used.contains("malloc") && used.contains("y1") && !used.contains("e5f"));
        assert!(clash("malloc", &used).is_some() && clash("int", &used).is_some() && clash("ard_q", &used).is_some());
        assert!(clash("arden_f", &used).is_none());
        assert!(clash("fprintf", &used).is_some() && clash("strtok", &used).is_some() && clash("omp_x", &used).is_some());
    }

    #[test]
    fn local_names_are_tagged() {
        assert_eq!(local_name("a0", "x'", &[1, 0]), "a0_x_p_1_0");
        assert_eq!(local_name("s1", "size_t", &[]), "s1_size_t");
    }
}
