//! toolhost-macros - the declarations of the toolhost crate, which
//! re-exports them (use them as `toolhost::Params`, `#[toolhost::tool]`,
//! `toolhost::plugin!`).  Each expands to static descriptors of the C ABI
//! (toolhost-sys) built at compile time: nothing is allocated at load,
//! nothing to free at unload.
use proc_macro::TokenStream;
use proc_macro2::{Span, TokenStream as TokenStream2};
use quote::{format_ident, quote, quote_spanned};
use syn::parse::{Parse, ParseStream};
use syn::spanned::Spanned;
use syn::{Attribute, Data, DeriveInput, Expr, Fields, FnArg, Ident, ItemFn, Lit, Token};

/// `key = value` pairs, comma separated: the arguments of every macro here.
struct Args(Vec<(Ident, Expr)>);

impl Parse for Args {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        let mut v = Vec::new();
        while !input.is_empty() {
            let k: Ident = input.call(syn::ext::IdentExt::parse_any)?;
            input.parse::<Token![=]>()?;
            let e: Expr = input.parse()?;
            v.push((k, e));
            if input.is_empty() {
                break;
            }
            input.parse::<Token![,]>()?;
        }
        Ok(Args(v))
    }
}

fn err(span: Span, msg: &str) -> syn::Error {
    syn::Error::new(span, msg)
}

/// The string literal an expression must be.
fn lit_str(e: &Expr) -> syn::Result<String> {
    match e {
        Expr::Lit(l) => match &l.lit {
            Lit::Str(s) => Ok(s.value()),
            _ => Err(err(e.span(), "expected a string literal")),
        },
        _ => Err(err(e.span(), "expected a string literal")),
    }
}

/// A NUL-terminated C string constant of `s`, as `*const c_char`.
fn cstr(s: &str) -> syn::Result<TokenStream2> {
    if s.contains('\0') {
        return Err(err(Span::call_site(), "a string of a declaration cannot hold a NUL"));
    }
    let z = format!("{}\0", s);
    Ok(quote!(::toolhost::__rt::cstr(#z)))
}

fn cstr_opt(s: &Option<String>) -> syn::Result<TokenStream2> {
    match s {
        Some(s) => cstr(s),
        None => Ok(quote!(::core::ptr::null())),
    }
}

/// The text of the `///` comments among attrs: (first paragraph as one
/// line, the rest as paragraphs), both None when there is none.
fn doc(attrs: &[Attribute]) -> (Option<String>, Option<String>) {
    let mut lines = Vec::new();
    for a in attrs {
        if !a.path.is_ident("doc") {
            continue;
        }
        if let Ok(syn::Meta::NameValue(nv)) = a.parse_meta() {
            if let Lit::Str(s) = nv.lit {
                lines.push(s.value().trim().to_string());
            }
        }
    }
    let mut first = Vec::new();
    let mut i = 0;
    while i < lines.len() && lines[i].is_empty() {
        i += 1;
    }
    while i < lines.len() && !lines[i].is_empty() {
        first.push(lines[i].clone());
        i += 1;
    }
    let rest: Vec<String> = lines[i.min(lines.len())..].to_vec();
    let rest = rest.join("\n").trim().to_string();
    let first = if first.is_empty() { None } else { Some(first.join(" ")) };
    (first, if rest.is_empty() { None } else { Some(rest) })
}

/// A literal as JSON text, for a parameter's default.
fn json_of(e: &Expr) -> syn::Result<String> {
    let lit = match e {
        Expr::Lit(l) => l.lit.clone(),
        Expr::Unary(u) if matches!(u.op, syn::UnOp::Neg(_)) => {
            return Ok(format!("-{}", json_of(&u.expr)?));
        }
        _ => return Err(err(e.span(), "a default is a literal: \"text\", 3, 2.5 or true")),
    };
    Ok(match lit {
        Lit::Str(s) => {
            let mut o = String::from("\"");
            for c in s.value().chars() {
                match c {
                    '"' => o.push_str("\\\""),
                    '\\' => o.push_str("\\\\"),
                    '\n' => o.push_str("\\n"),
                    '\r' => o.push_str("\\r"),
                    '\t' => o.push_str("\\t"),
                    c if (c as u32) < 0x20 => o.push_str(&format!("\\u{:04x}", c as u32)),
                    c => o.push(c),
                }
            }
            o.push('"');
            o
        }
        Lit::Int(i) => i.base10_digits().to_string(),
        Lit::Float(f) => f.base10_digits().to_string(),
        Lit::Bool(b) => b.value.to_string(),
        _ => return Err(err(e.span(), "a default is a literal: \"text\", 3, 2.5 or true")),
    })
}

/// A number literal (maybe negative) as an f64 expression.
fn num(e: &Expr) -> TokenStream2 {
    quote!(((#e) as f64))
}

/// `A | B | C` with each name looked up in `module` (flags, semantic types).
fn bits(e: &Expr, module: &str) -> TokenStream2 {
    let m = format_ident!("{}", module);
    quote!({
        #[allow(unused_imports)]
        use ::toolhost::#m::*;
        #e
    })
}

// ---- #[derive(Params)] -------------------------------------------------

/// Declares the parameters of a tool from the fields of a struct: one
/// parameter per field, its JSON type from the field's Rust type (String:
/// string, integers: integer, floats: number, bool: boolean, Vec: array;
/// Option<T>: not required), its description from the field's `///`
/// comment, its constraints from `#[param(...)]`: min_length, max_length,
/// pattern, enum_values = ["a", "b"], minimum, maximum, exclusive_minimum,
/// exclusive_maximum, min_items, max_items, default (a literal; the host
/// fills it in), schema (JSON Schema text, objects and arrays),
/// json_type ("object", "array", ... overrides the Rust type's),
/// description (instead of the comment), name (the key, if not the
/// field's name; give serde the same rename).
#[proc_macro_derive(Params, attributes(param))]
pub fn derive_params(input: TokenStream) -> TokenStream {
    let input = syn::parse_macro_input!(input as DeriveInput);
    match params_impl(&input) {
        Ok(t) => t.into(),
        Err(e) => e.to_compile_error().into(),
    }
}

fn params_impl(input: &DeriveInput) -> syn::Result<TokenStream2> {
    let fields = match &input.data {
        Data::Struct(s) => match &s.fields {
            Fields::Named(n) => n.named.iter().collect::<Vec<_>>(),
            Fields::Unit => Vec::new(),
            _ => return Err(err(input.span(), "Params: a struct with named fields")),
        },
        _ => return Err(err(input.span(), "Params: a struct with named fields")),
    };
    let mut params = Vec::new();
    for f in fields {
        let ident = f.ident.as_ref().unwrap();
        let ty = &f.ty;
        let mut name = ident.to_string();
        if let Some(stripped) = name.strip_prefix("r#") {
            name = stripped.to_string();
        }
        let (mut desc, _) = doc(&f.attrs);
        let mut set = Vec::new();
        let mut bounds = Vec::new();
        let mut has_default = false;
        let mut json_type = None;
        for a in &f.attrs {
            if !a.path.is_ident("param") {
                continue;
            }
            let args: Args = a.parse_args()?;
            for (k, v) in &args.0 {
                let key = k.to_string();
                match key.as_str() {
                    "name" => name = lit_str(v)?,
                    "description" => desc = Some(lit_str(v)?),
                    "min_length" | "max_length" | "min_items" | "max_items" => {
                        let k = format_ident!("{}", key);
                        set.push(quote!(#k: (#v) as u32,));
                    }
                    "minimum" | "maximum" | "exclusive_minimum" | "exclusive_maximum" => {
                        let field = if key.ends_with("minimum") { quote!(minimum) } else { quote!(maximum) };
                        let bit = format_ident!("TOOLHOST_BOUND_{}", key.to_uppercase());
                        let n = num(v);
                        set.push(quote!(#field: #n,));
                        bounds.push(quote!(::toolhost::sys::#bit));
                    }
                    "pattern" => {
                        let c = cstr(&lit_str(v)?)?;
                        set.push(quote!(pattern: #c,));
                    }
                    "schema" => {
                        let c = cstr(&lit_str(v)?)?;
                        set.push(quote!(schema_json: #c,));
                    }
                    "default" => {
                        let c = cstr(&json_of(v)?)?;
                        set.push(quote!(default_json: #c,));
                        has_default = true;
                    }
                    "json_type" => {
                        let t = match lit_str(v)?.as_str() {
                            "string" => quote!(STRING),
                            "integer" => quote!(INTEGER),
                            "number" => quote!(NUMBER),
                            "boolean" => quote!(BOOLEAN),
                            "array" => quote!(ARRAY),
                            "object" => quote!(OBJECT),
                            _ => return Err(err(v.span(), "json_type: string, integer, number, boolean, array or object")),
                        };
                        json_type = Some(t);
                    }
                    "enum_values" => {
                        let arr = match v {
                            Expr::Array(a) => a,
                            _ => return Err(err(v.span(), "enum_values = [\"a\", \"b\"]")),
                        };
                        let mut items = Vec::new();
                        for e in &arr.elems {
                            items.push(cstr(&lit_str(e)?)?);
                        }
                        set.push(quote!(enum_values: {
                            const V: &[*const ::std::os::raw::c_char] = &[#(#items,)* ::core::ptr::null()];
                            V.as_ptr()
                        },));
                    }
                    _ => return Err(err(k.span(), "unknown #[param] key")),
                }
            }
        }
        let desc = match desc {
            Some(d) => d,
            None => {
                return Err(err(
                    ident.span(),
                    "a parameter needs a description: a /// comment or #[param(description = \"...\")]",
                ))
            }
        };
        if !(name.len() <= 64 && name.chars().next().map_or(false, |c| c == '_' || c.is_ascii_alphabetic())
            && name.chars().all(|c| c == '_' || c.is_ascii_alphanumeric()))
        {
            return Err(err(ident.span(), "a parameter name is ^[a-zA-Z_][a-zA-Z0-9_]{0,63}$"));
        }
        let cname = cstr(&name)?;
        let cdesc = cstr(&desc)?;
        let ty_tokens = match &json_type {
            Some(t) => {
                let id = format_ident!("toolhost_type_TOOLHOST_TYPE_{}", t.to_string());
                quote!(::toolhost::sys::#id)
            }
            None => quote!(<#ty as ::toolhost::ParamType>::TYPE),
        };
        let bounds = if bounds.is_empty() { quote!(0) } else { quote!(#(#bounds)|*) };
        params.push(quote_spanned! {f.span()=>
            ::toolhost::sys::toolhost_param {
                struct_size: ::core::mem::size_of::<::toolhost::sys::toolhost_param>() as u32,
                name: #cname,
                type_: #ty_tokens,
                required: (!<#ty as ::toolhost::ParamType>::OPTIONAL && !#has_default) as ::std::os::raw::c_int,
                description: #cdesc,
                item_type: <#ty as ::toolhost::ParamType>::ITEM_TYPE,
                bounds: (#bounds) as u32,
                #(#set)*
                ..::toolhost::__rt::ZERO_PARAM
            }
        });
    }
    let name = &input.ident;
    let (ig, tg, wc) = input.generics.split_for_impl();
    Ok(quote! {
        impl #ig ::toolhost::Params for #name #tg #wc {
            const PARAMS: &'static [::toolhost::sys::toolhost_param] = &[#(#params),*];
        }
    })
}

// ---- #[tool] -------------------------------------------------------------

/// Declares a function as a tool.  The function takes the call and,
/// optionally, its arguments (a type with `#[derive(Params,
/// Deserialize)]`), and returns `toolhost::ToolResult` (or, after
/// `Call::suspend`, `toolhost::Pending` / `Result<Pending, Error>`):
///
/// ```ignore
/// /// Writes `text` to stdout unchanged.
/// #[toolhost::tool(flags = READ_ONLY | IDEMPOTENT)]
/// fn echo(call: Call, args: EchoArgs) -> ToolResult { ... }
/// ```
///
/// Keys: name (default: the function's), description (default: the first
/// paragraph of the `///` comment), long_description (default: the rest
/// of it), title, flags (names of `toolhost::flags` joined with `|`),
/// stdout and stderr (names of `toolhost::semantic`; default TEXT and
/// ERROR), output_schema (JSON Schema text of stdout; makes stdout
/// STRUCTURED), validate (a `fn(&Args) -> Result<(), String>` run before
/// execute: the host's validate_args), tags (ABI 1.5: `tags = ["files",
/// "read-only"]`, names operators' toolsets select the tool by, each
/// ^[a-z0-9][a-z0-9_-]{0,31}$, at most 16, checked at compile time).
#[proc_macro_attribute]
pub fn tool(attr: TokenStream, item: TokenStream) -> TokenStream {
    let args = syn::parse_macro_input!(attr as Args);
    let f = syn::parse_macro_input!(item as ItemFn);
    match tool_impl(args, f) {
        Ok(t) => t.into(),
        Err(e) => e.to_compile_error().into(),
    }
}

fn tool_impl(args: Args, f: ItemFn) -> syn::Result<TokenStream2> {
    let fname = &f.sig.ident;
    let (mut desc, mut long) = doc(&f.attrs);
    let mut name = fname.to_string();
    let mut title = None;
    let mut flags = quote!(0u32);
    let mut stdout = quote!(::toolhost::semantic::TEXT);
    let mut stderr = quote!(::toolhost::semantic::ERROR);
    let mut schema = None;
    let mut validate = None;
    let mut tags: Option<Vec<String>> = None;
    let mut stdout_set = false;
    for (k, v) in &args.0 {
        match k.to_string().as_str() {
            "name" => name = lit_str(v)?,
            "description" => desc = Some(lit_str(v)?),
            "long_description" => long = Some(lit_str(v)?),
            "title" => title = Some(lit_str(v)?),
            "flags" => {
                let b = bits(v, "flags");
                flags = quote!((#b) as u32);
            }
            "stdout" => {
                stdout = bits(v, "semantic");
                stdout_set = true;
            }
            "stderr" => stderr = bits(v, "semantic"),
            "output_schema" => schema = Some(lit_str(v)?),
            "validate" => validate = Some(v.clone()),
            "tags" => {
                let arr = match v {
                    Expr::Array(a) => a,
                    _ => return Err(err(v.span(), "tags = [\"a\", \"b\"]")),
                };
                let mut names: Vec<String> = Vec::new();
                for e in &arr.elems {
                    let t = lit_str(e)?;
                    let b = t.as_bytes();
                    let ok = (1..=32).contains(&b.len())
                        && (b[0].is_ascii_lowercase() || b[0].is_ascii_digit())
                        && b.iter().all(|&c| {
                            c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'_' || c == b'-'
                        });
                    if !ok {
                        return Err(err(e.span(), "a tag is ^[a-z0-9][a-z0-9_-]{0,31}$"));
                    }
                    if names.contains(&t) {
                        return Err(err(e.span(), "this tag is declared twice"));
                    }
                    names.push(t);
                }
                if names.len() > 16 {
                    return Err(err(v.span(), "at most 16 tags (TOOLHOST_MAX_TAGS)"));
                }
                tags = Some(names);
            }
            _ => return Err(err(k.span(), "unknown #[tool] key")),
        }
    }
    if schema.is_some() && !stdout_set {
        stdout = quote!(::toolhost::semantic::STRUCTURED);
    }
    if !(1..=64).contains(&name.len())
        || !name.chars().all(|c| c == '_' || c == '-' || c.is_ascii_alphanumeric())
    {
        return Err(err(fname.span(), "a tool name is ^[a-zA-Z0-9_-]{1,64}$"));
    }
    let desc = desc.ok_or_else(|| {
        err(fname.span(), "a tool needs a description: a /// comment or #[tool(description = \"...\")]")
    })?;
    let inputs: Vec<&FnArg> = f.sig.inputs.iter().collect();
    let arg_ty = match inputs.len() {
        1 => None,
        2 => match inputs[1] {
            FnArg::Typed(t) => Some((*t.ty).clone()),
            FnArg::Receiver(r) => return Err(err(r.span(), "a tool is a free function")),
        },
        _ => {
            return Err(err(
                f.sig.span(),
                "a tool takes (call: Call) or (call: Call, args: Args)",
            ))
        }
    };
    let exec = format_ident!("__toolhost_exec_{}", fname);
    let desc_ident = format_ident!("__toolhost_tool_{}", fname);
    let (params_ptr, n_params, body) = match &arg_ty {
        None => (
            quote!(::core::ptr::null()),
            quote!(0u32),
            quote!(::toolhost::__rt::execute0(call, #fname)),
        ),
        Some(t) => (
            quote!(<#t as ::toolhost::Params>::PARAMS.as_ptr()),
            quote!(<#t as ::toolhost::Params>::PARAMS.len() as u32),
            quote!(::toolhost::__rt::execute(call, args, len, #fname)),
        ),
    };
    let (validate_fn, validate_ptr) = match (&validate, &arg_ty) {
        (Some(v), Some(_)) => {
            let vname = format_ident!("__toolhost_validate_{}", fname);
            (
                quote! {
                    #[doc(hidden)]
                    #[allow(non_snake_case)]
                    unsafe extern "C" fn #vname(
                        _state: *mut ::std::os::raw::c_void,
                        _tool: *const ::toolhost::sys::toolhost_tool,
                        args: *const u8,
                        len: usize,
                        err: *mut ::std::os::raw::c_char,
                        err_size: usize,
                    ) -> ::std::os::raw::c_int {
                        ::toolhost::__rt::validate(args, len, err, err_size, #v)
                    }
                },
                quote!(::core::option::Option::Some(#vname)),
            )
        }
        (Some(v), None) => return Err(err(v.span(), "validate needs an arguments type")),
        (None, _) => (quote!(), quote!(::core::option::Option::None)),
    };
    let cname = cstr(&name)?;
    let cdesc = cstr(&desc)?;
    let clong = cstr_opt(&long)?;
    let ctitle = cstr_opt(&title)?;
    let cschema = cstr_opt(&schema)?;
    let ctags = match &tags {
        Some(v) if !v.is_empty() => {
            let mut items = Vec::new();
            for t in v {
                items.push(cstr(t)?);
            }
            quote!({
                const V: &[*const ::std::os::raw::c_char] = &[#(#items,)* ::core::ptr::null()];
                V.as_ptr()
            })
        }
        _ => quote!(::core::ptr::null()),
    };
    Ok(quote! {
        #f

        #[doc(hidden)]
        #[allow(non_snake_case)]
        unsafe extern "C" fn #exec(
            _state: *mut ::std::os::raw::c_void,
            _tool: *const ::toolhost::sys::toolhost_tool,
            call: *mut ::toolhost::sys::toolhost_call,
            args: *const u8,
            len: usize,
        ) -> ::std::os::raw::c_int {
            let _ = (args, len);
            #body
        }

        #validate_fn

        #[doc(hidden)]
        #[allow(non_upper_case_globals)]
        pub(crate) const #desc_ident: ::toolhost::sys::toolhost_tool = ::toolhost::sys::toolhost_tool {
            struct_size: ::core::mem::size_of::<::toolhost::sys::toolhost_tool>() as u32,
            name: #cname,
            description: #cdesc,
            long_description: #clong,
            params: #params_ptr,
            n_params: #n_params,
            stdout_type: (#stdout) as u32,
            stderr_type: (#stderr) as u32,
            flags: #flags,
            execute: ::core::option::Option::Some(#exec),
            needs_permission: ::core::option::Option::None,
            validate_args: #validate_ptr,
            user_data: ::core::ptr::null(),
            title: #ctitle,
            output_schema: #cschema,
            tags: #ctags,
            ..::toolhost::__rt::ZERO_TOOL
        };
    })
}

// ---- plugin! -------------------------------------------------------------

/// Declares the plugin: its exported entry point `toolhost_plugin_v1` and
/// the static descriptor it returns.
///
/// ```ignore
/// toolhost::plugin!(tools = [echo, more::other]);
/// ```
///
/// Keys: tools (the `#[tool]` functions, by path), name, version and
/// description (default: the package's, from Cargo.toml), flags (names of
/// `toolhost::plugin_flags` joined with `|`).
#[proc_macro]
pub fn plugin(input: TokenStream) -> TokenStream {
    let args = syn::parse_macro_input!(input as Args);
    match plugin_impl(args) {
        Ok(t) => t.into(),
        Err(e) => e.to_compile_error().into(),
    }
}

fn plugin_impl(args: Args) -> syn::Result<TokenStream2> {
    let mut name = quote!(::toolhost::__rt::cstr(concat!(env!("CARGO_PKG_NAME"), "\0")));
    let mut version = quote!(::toolhost::__rt::cstr(concat!(env!("CARGO_PKG_VERSION"), "\0")));
    let mut description =
        quote!(::toolhost::__rt::cstr(concat!(env!("CARGO_PKG_DESCRIPTION"), "\0")));
    let mut flags = quote!(0u64);
    let mut tools = None;
    for (k, v) in &args.0 {
        match k.to_string().as_str() {
            "name" => {
                let s = lit_str(v)?;
                if !(1..=64).contains(&s.len())
                    || !s.chars().all(|c| c == '_' || c == '-' || c.is_ascii_alphanumeric())
                {
                    return Err(err(v.span(), "a plugin name is ^[a-zA-Z0-9_-]{1,64}$"));
                }
                name = cstr(&s)?;
            }
            "version" => version = cstr(&lit_str(v)?)?,
            "description" => description = cstr(&lit_str(v)?)?,
            "flags" => {
                let b = bits(v, "plugin_flags");
                flags = quote!((#b) as u64);
            }
            "tools" => match v {
                Expr::Array(a) => {
                    let mut t = Vec::new();
                    for e in &a.elems {
                        let mut p = match e {
                            Expr::Path(p) => p.path.clone(),
                            _ => return Err(err(e.span(), "a tool is named by its function's path")),
                        };
                        let last = p.segments.last_mut().unwrap();
                        last.ident = format_ident!("__toolhost_tool_{}", last.ident);
                        t.push(p);
                    }
                    tools = Some(t);
                }
                _ => return Err(err(v.span(), "tools = [a, b, ...]")),
            },
            _ => return Err(err(k.span(), "unknown plugin! key")),
        }
    }
    let tools = tools.ok_or_else(|| err(Span::call_site(), "plugin!: give tools = [...]"))?;
    let n = tools.len();
    Ok(quote! {
        #[doc(hidden)]
        static __TOOLHOST_TOOLS: ::toolhost::__rt::Static<[::toolhost::sys::toolhost_tool; #n]> =
            ::toolhost::__rt::Static([#(#tools),*]);

        #[doc(hidden)]
        static __TOOLHOST_PLUGIN: ::toolhost::__rt::Static<::toolhost::sys::toolhost_plugin> =
            ::toolhost::__rt::Static(::toolhost::sys::toolhost_plugin {
                struct_size: ::core::mem::size_of::<::toolhost::sys::toolhost_plugin>() as u32,
                abi_major: ::toolhost::sys::TOOLHOST_ABI_MAJOR as u32,
                abi_minor: ::toolhost::sys::TOOLHOST_ABI_MINOR as u32,
                name: #name,
                version: #version,
                description: #description,
                config_params: ::core::ptr::null(),
                n_config_params: 0,
                init: ::core::option::Option::Some(::toolhost::__rt::init),
                fini: ::core::option::Option::Some(::toolhost::__rt::fini),
                tools: &__TOOLHOST_TOOLS.0 as *const _ as *const ::toolhost::sys::toolhost_tool,
                n_tools: #n as u32,
                flags: #flags,
                requires_host_minor: 0,
                init_tools: ::core::option::Option::None,
                ..::toolhost::__rt::ZERO_PLUGIN
            });

        /// The plugin's entry point: its static descriptor.
        #[no_mangle]
        pub extern "C" fn toolhost_plugin_v1() -> *const ::toolhost::sys::toolhost_plugin {
            &__TOOLHOST_PLUGIN.0
        }
    })
}
