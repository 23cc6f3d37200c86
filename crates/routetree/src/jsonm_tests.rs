use serde_json::{json, Value};

use super::*;

fn run(config: Value) -> std::result::Result<Value, ConfigError> {
    expand_text("t.json", &config.to_string(), &Env::default())
}

/// Expands `orig` with `macros`, as the value of the config's `orig`.
fn x(macros: Value, orig: Value) -> Value {
    let out = run(json!({"macros": macros, "orig": orig})).unwrap_or_else(|e| panic!("{e}"));
    out["orig"].clone()
}

/// Expands `orig` with no macros of the config's own.
fn b(orig: Value) -> Value {
    x(json!({}), orig)
}

/// The error expanding `orig`.
fn be(orig: Value) -> String {
    err(json!({ "orig": orig }))
}

fn err(config: Value) -> String {
    // Not `expect_err`: printing a deep value on failure would overflow the stack.
    match run(config) {
        Ok(_) => panic!("expansion must fail"),
        Err(e) => e.to_string(),
    }
}

fn mdef(params: Value, result: Value) -> Value {
    json!({"type": "macroDef", "params": params, "result": result})
}

#[test]
fn macros_take_params_defaults_and_optionals() {
    let macros = json!({
        "greet": mdef(json!(["who", {"name": "how", "default": "hello"}]), json!("%how% %who%")),
        "opt": mdef(json!([{"name": "a", "optional": true}]), json!("@defined(a)")),
        "plain": {"type": "macroDef", "result": "fixed"},
    });
    assert_eq!(x(macros.clone(), json!("@greet(bob)")), json!("hello bob"));
    assert_eq!(x(macros.clone(), json!("@greet(bob, hi)")), json!("hi bob"));
    assert_eq!(x(macros.clone(), json!("@plain")), json!("fixed"));
    // An optional parameter left out is not defined in the body.
    assert_eq!(x(macros.clone(), json!("@opt()")), json!(true));
    assert_eq!(x(macros.clone(), json!("@opt")), json!(false));
    // Object form: parameters by name, expanded; unknown keys ignored.
    assert_eq!(
        x(
            macros.clone(),
            json!({"type": "greet", "who": "@str(@int(7))", "x": 1})
        ),
        json!("hello 7")
    );
    let e = err(json!({"macros": macros, "orig": {"type": "greet"}}));
    assert!(
        e.contains("Macro call greet: 'who' parameter not found"),
        "{e}"
    );
}

#[test]
fn string_call_arguments_are_trimmed_and_unescaped() {
    let macros = json!({"id": mdef(json!(["a"]), json!("%a%"))});
    assert_eq!(x(macros.clone(), json!("@id(  )")), json!(""));
    assert_eq!(x(macros.clone(), json!("@id(a\\ )")), json!("a "));
    assert_eq!(x(macros.clone(), json!("@id(  \\)  )")), json!(")"));
    assert_eq!(x(macros.clone(), json!("@id(x\\,y)")), json!("x,y"));
    assert_eq!(x(macros.clone(), json!("a\\@b\\%c")), json!("a@b%c"));
    // A call's text must end at its closing bracket.
    let e = err(json!({"macros": macros, "orig": "@id()a"}));
    assert!(e.contains("No closing bracket for call '@id()a'"), "{e}");
}

#[test]
fn params_substitute_in_strings_and_keys_and_keep_their_type() {
    let macros = json!({
        "m": mdef(json!(["k", "v"]), json!({"%k%-x": "%v%", "s": "<%k%>"})),
        "obj": {"type": "constDef", "result": {"a": [1, 2]}},
    });
    assert_eq!(
        x(
            macros.clone(),
            json!({"type": "m", "k": "key", "v": "%obj%"})
        ),
        json!({"key-x": {"a": [1, 2]}, "s": "<key>"})
    );
    let e = err(json!({"macros": macros, "orig": "a%obj%"}));
    assert!(e.contains("Param in string 'obj' is not a string"), "{e}");
    assert!(be(json!("%nope%")).contains("Param in string: 'nope' not found"));
    assert!(be(json!("50% off")).contains("Odd number of percent signs"));
}

#[test]
fn consts_expand_lazily_and_globals_are_consts() {
    let macros = json!({
        "base": {"type": "constDef", "result": "@int(10)"},
        "twice": {"type": "constDef", "result": "@mul(%base%, @int(2))"},
    });
    assert_eq!(x(macros, json!("%twice%")), json!(20));
    let env = Env {
        globals: json!({"default-route": "/r/c/"})
            .as_object()
            .unwrap()
            .clone(),
        ..Env::default()
    };
    let out = expand_text("g.json", r#"{"p": "%default-route%x"}"#, &env).unwrap();
    assert_eq!(out["p"], json!("/r/c/x"));
}

#[test]
fn route_globals_split_the_default_prefix() {
    let g = route_globals("/reg/clu/");
    assert_eq!(g["default-route"], json!("/reg/clu/"));
    assert_eq!(g["default-region"], json!("reg"));
    assert_eq!(g["default-cluster"], json!("clu"));
}

#[test]
fn macro_definitions_may_be_a_list_using_earlier_ones() {
    let macros = json!([
        {"one": mdef(json!([]), json!("@int(1)"))},
        {"two": mdef(json!([]), json!("@add(@one, @one)"))},
        // A later definition replaces an earlier one, also for macros defined before it.
        {"one": mdef(json!([]), json!("@int(5)"))},
        // A definition may shadow a built-in.
        {"size": mdef(json!(["v"]), json!("mine"))},
    ]);
    assert_eq!(x(macros.clone(), json!("@two")), json!(10));
    assert_eq!(x(macros, json!("@size(abc)")), json!("mine"));
}

#[test]
fn vars_are_lazy_and_scoped_and_macro_bodies_see_only_their_params() {
    let orig = json!({
        "vars": {"b": "%a%-b", "a": "A"},
        "v": "%b%",
        "inner": {"vars": {"a": "inner"}, "v": "%a% %b%"},
    });
    assert_eq!(b(orig), json!({"v": "A-b", "inner": {"v": "inner A-b"}}));
    let macros = json!({"peek": mdef(json!([]), json!("%secret%"))});
    let e = err(json!({"macros": macros, "orig": {"vars": {"secret": "s"}, "v": "@peek"}}));
    assert!(e.contains("'secret' not found"), "{e}");
    let e = be(json!({"vars": {"a": "%b%", "b": "%a%"}, "v": 1}));
    assert!(e.contains("Check for cycles"), "{e}");
    assert!(be(json!({"vars": [1]})).contains("vars is array, expected object"));
}

#[test]
fn casts() {
    assert_eq!(b(json!("@int( -1 )")), json!(-1));
    assert_eq!(b(json!("@str(@int(5))")), json!("5"));
    assert_eq!(b(json!("@double(5.5)")), json!(5.5));
    assert_eq!(b(json!("@str(@double(5.5))")), json!("5.5"));
    assert_eq!(b(json!("@bool(@int(0) )")), json!(false));
    assert_eq!(b(json!("@bool(true)")), json!(true));
    assert!(be(json!("@double(1.a)")).contains("Can not cast string to double"));
    assert!(be(json!("@int(x)")).contains("Can not cast string to int"));
    assert!(be(json!("@bool(maybe)")).contains("Can not cast string to boolean"));
    assert!(be(json!({"type": "str", "value": [1]})).contains("Can not cast array to string"));
}

#[test]
fn keys_values_size_empty_contains() {
    let d = json!({"a": 1, "b": 2});
    assert_eq!(
        b(json!({"type": "keys", "dictionary": d})),
        json!(["a", "b"])
    );
    assert_eq!(b(json!({"type": "values", "dictionary": d})), json!([1, 2]));
    assert_eq!(b(json!({"type": "size", "dictionary": d})), json!(2));
    assert_eq!(b(json!("@size(abc)")), json!(3));
    assert_eq!(b(json!("@empty()")), json!(true));
    assert_eq!(b(json!({"type": "empty", "dictionary": []})), json!(true));
    assert_eq!(
        b(json!({"type": "contains", "dictionary": d, "key": "b"})),
        json!(true)
    );
    assert_eq!(
        b(json!({"type": "contains", "dictionary": [1, 2.0], "key": 2})),
        json!(true)
    );
    assert_eq!(b(json!("@contains(hello,ell)")), json!(true));
    assert!(
        be(json!({"type": "keys", "dictionary": []})).contains("Keys: dictionary is not object")
    );
    assert!(
        be(json!({"type": "contains", "dictionary": d, "key": 1})).contains("key is not a string")
    );
}

#[test]
fn merge_lists_objects_and_strings() {
    assert_eq!(
        b(json!({"type": "merge", "params": [[1], [2, 3]]})),
        json!([1, 2, 3])
    );
    assert_eq!(
        b(json!({"type": "merge", "params": [{"a": 1, "b": 1}, {"b": 2}]})),
        json!({"a": 1, "b": 2})
    );
    assert_eq!(
        b(json!({"type": "merge", "params": ["ab", "cd"]})),
        json!("abcd")
    );
    assert!(
        be(json!({"type": "merge", "params": [[], {}]})).contains("Merge: param 1 is not an array")
    );
    assert!(be(json!({"type": "merge", "params": []})).contains("Merge: empty params"));
    assert!(be(json!({"type": "merge", "params": [1]}))
        .contains("first param is not array/object/string"));
}

#[test]
fn select_by_key_or_index_with_default() {
    let d = json!({"a": 1});
    assert_eq!(
        b(json!({"type": "select", "dictionary": d, "key": "a"})),
        json!(1)
    );
    assert_eq!(
        b(json!({"type": "select", "dictionary": [1, 2, 3], "key": -1})),
        json!(3)
    );
    assert_eq!(
        b(json!({"type": "select", "dictionary": d, "key": "z", "default": "dflt"})),
        json!("dflt")
    );
    // The default is expanded only when needed.
    assert_eq!(
        b(json!({"type": "select", "dictionary": d, "key": "a", "default": "@fail(no)"})),
        json!(1)
    );
    assert!(be(json!({"type": "select", "dictionary": d, "key": "b"})).contains("'b' not found"));
    assert!(be(
        json!({"type": "select", "dictionary": ["a"], "key": 2, "default": "@fail(No key)"})
    )
    .contains("No key"));
    assert!(be(json!({"type": "select", "dictionary": ["a"], "key": 3})).contains("out of range"));
    assert!(be(json!({"type": "select", "dictionary": d, "key": ["a"]}))
        .contains("key is not a string"));
}

#[test]
fn slice_split_range() {
    assert_eq!(b(json!("@slice(abcd,@int(2),@int(3))")), json!("cd"));
    assert_eq!(
        b(json!("@slice(abcd, @int(-10), @int(10000))")),
        json!("abcd")
    );
    assert_eq!(b(json!("@slice(abcd, @int(3), @int(1))")), json!(""));
    assert_eq!(
        b(json!({"type": "slice", "dictionary": [0, 1, 2, 3], "from": 1, "to": 2})),
        json!([1, 2])
    );
    assert_eq!(
        b(json!({"type": "slice", "dictionary": {"a": 1, "b": 2, "c": 3}, "from": "b", "to": "c"})),
        json!({"b": 2, "c": 3})
    );
    assert_eq!(
        b(json!({"type": "split", "dictionary": "a.b.c.", "delim": "."})),
        json!(["a", "b", "c", ""])
    );
    assert_eq!(
        b(json!("@range( @int(-1), @int(2) )")),
        json!([-1, 0, 1, 2])
    );
    assert_eq!(b(json!("@range(@int(2), @int(1))")), json!([]));
    assert!(be(json!("@range(a, @int(1))")).contains("Range: from is not an integer"));
    assert!(be(json!({"type": "slice", "dictionary": 1, "from": 0, "to": 1})).contains("Slice"));
}

#[test]
fn comparisons_and_type_tests() {
    assert_eq!(b(json!("@equals(@int(1), @double(1.0))")), json!(true));
    assert_eq!(b(json!("@equals(a, b)")), json!(false));
    assert_eq!(b(json!("@less(a, b)")), json!(true));
    assert_eq!(b(json!("@less(@int(2), @double(1.5))")), json!(false));
    assert!(be(json!({"type": "less", "A": {}, "B": 1})).contains("Can not compare objects"));
    for (name, value, yes) in [
        ("isArray", json!([]), true),
        ("isBool", json!(false), true),
        ("isInt", json!(1), true),
        ("isInt", json!(1.5), false),
        ("isDouble", json!(1.5), true),
        ("isObject", json!({}), true),
        ("isString", json!(1), false),
    ] {
        assert_eq!(
            b(json!({"type": name, "value": value})),
            json!(yes),
            "{name}"
        );
    }
}

#[test]
fn boolean_logic_is_lazy() {
    assert_eq!(
        b(json!(
            "@and(@not(@or(@bool(false),@bool(1))), @not(@bool(false)))"
        )),
        json!(false)
    );
    assert_eq!(b(json!("@and(@bool(false), @fail(never))")), json!(false));
    assert_eq!(b(json!("@or(@bool(true), @fail(never))")), json!(true));
    assert!(be(json!("@and(x, @bool(true))")).contains("and: A is string, expected bool"));
    assert!(be(json!("@not(x)")).contains("not: A is not bool"));
}

#[test]
fn arithmetic_and_bits() {
    assert_eq!(b(json!("@add(@int(2), @int(3))")), json!(5));
    assert_eq!(b(json!("@sub(@int(2), @int(3))")), json!(-1));
    assert_eq!(b(json!("@mul(@int(2), @int(3))")), json!(6));
    assert_eq!(b(json!("@div(@int(7), @int(2))")), json!(3));
    assert_eq!(b(json!("@mod(@int(-7), @int(3))")), json!(-1));
    assert_eq!(b(json!("@bitwiseAnd(@int(6), @int(3))")), json!(2));
    assert_eq!(b(json!("@bitwiseOr(@int(6), @int(3))")), json!(7));
    assert_eq!(b(json!("@bitwiseXor(@int(6), @int(3))")), json!(5));
    assert_eq!(b(json!("@bitwiseNot(@int(0))")), json!(-1));
    assert_eq!(b(json!("@bitwiseLeftShift(@int(1), @int(4))")), json!(16));
    assert_eq!(
        b(json!("@bitwiseRightShift(@int(-1), @int(60))")),
        json!(15)
    );
    assert!(be(json!("@div(@int(1), @int(0))")).contains("div: B == 0"));
    assert!(be(json!("@mod(@int(1), @int(0))")).contains("mod: B == 0"));
    assert!(be(json!("@add(1, @int(0))")).contains("add: A is not an integer"));
    assert!(be(json!("@bitwiseLeftShift(@int(1), @int(64))")).contains("out of range"));
}

#[test]
fn sort_set_fail_define_defined() {
    assert_eq!(
        b(json!({"type": "sort", "dictionary": ["b", "a", 2, 1]})),
        json!([1, 2, "a", "b"])
    );
    assert!(be(json!({"type": "sort", "dictionary": [{}, 1]})).contains("Can not compare objects"));
    assert_eq!(
        b(json!({"type": "set", "dictionary": {"a": 1}, "key": "b", "value": 2})),
        json!({"a": 1, "b": 2})
    );
    assert_eq!(
        b(json!({"type": "set", "dictionary": [0, 0], "key": 1, "value": 2})),
        json!([0, 2])
    );
    assert!(
        be(json!({"type": "set", "dictionary": [0], "key": 1, "value": 2}))
            .contains("out of range")
    );
    assert!(be(json!("@fail(custom message)")).contains("custom message"));
    assert_eq!(
        b(json!({"type": "define", "vars": {"A": "B"}, "result": "%A%"})),
        json!("B")
    );
    let macros = json!({"c": {"type": "constDef", "result": 1}});
    assert_eq!(x(macros.clone(), json!("@defined(c)")), json!(true));
    assert_eq!(
        x(
            macros.clone(),
            json!({"vars": {"v": 1}, "r": "@defined(v)"})
        ),
        json!({"r": true})
    );
    assert_eq!(x(macros, json!("@defined(nope)")), json!(false));
}

#[test]
fn if_expands_only_the_branch_taken() {
    assert_eq!(b(json!("@if(@bool(true), abc, @fail(oops))")), json!("abc"));
    assert_eq!(
        b(json!({"type": "if", "condition": false, "is_true": "@fail(oops)", "is_false": "abc"})),
        json!("abc")
    );
    let e = be(json!({"type": "if", "condition": true, "is_true": "@fail(oops)", "is_false": 1}));
    assert!(
        e.contains("If 'is_true': Macro in string 'fail': oops"),
        "{e}"
    );
    assert!(be(json!("@if(x, a, b)")).contains("If: condition is not bool"));
    assert!(be(json!({"type": "if", "condition": true, "is_true": 1}))
        .contains("'is_false' parameter not found"));
}

#[test]
fn hash_matches_mcrouter() {
    // The values mcrouter's own tests expect.
    assert_eq!(b(json!("@hash(abcd)")), json!(6660178300034425268i64));
    assert_eq!(
        b(json!("@hash(@int(2313))")),
        json!(-4996987850411076878i64)
    );
    assert!(be(json!({"type": "hash", "value": []})).contains("can not cast array"));
    let long = "x".repeat(300);
    assert_eq!(
        b(json!({"type": "hash", "value": long})),
        json!(ring::spooky::hash64(long.as_bytes(), 0) as i64)
    );
}

#[test]
fn transform_rewrites_keys_and_items() {
    let orig = json!({
        "type": "transform",
        "dictionary": {"a": 1, "b": 2, "drop": 3},
        "keyTransform": "@if(@equals(%key%, drop), @merge(), %key%-k)",
        "itemTransform": ["%key%", "%item%"],
    });
    // `@merge()` fails on empty params; use a list key to drop instead.
    assert!(be(orig).contains("Merge"));
    let orig = json!({
        "type": "transform",
        "dictionary": {"a": 1, "b": 2},
        "keyTransform": {"type": "if", "condition": "@equals(%k%, b)", "is_true": [], "is_false": ["%k%1", "%k%2"]},
        "itemTransform": ["%k%", "%i%"],
        "keyName": "k",
        "itemName": "i",
    });
    assert_eq!(b(orig), json!({"a1": ["a", 1], "a2": ["a", 1]}));
    assert_eq!(
        b(
            json!({"type": "transform", "dictionary": [5, 6], "itemTransform": "@add(%item%, %key%)"})
        ),
        json!([5, 7])
    );
    assert!(
        be(json!({"type": "transform", "dictionary": [1]})).contains("itemTransform is required")
    );
    let e = be(
        json!({"type": "transform", "itemName": "key", "itemTransform": "%item%", "dictionary": {"a": 1}}),
    );
    assert!(e.contains("'key' already exists in local scope"), "{e}");
}

#[test]
fn process_folds() {
    let orig = json!({
        "type": "process",
        "initialValue": "@int(0)",
        "dictionary": [1, 2, 3],
        "transform": "@add(%value%, %item%)",
    });
    assert_eq!(b(orig), json!(6));
    let orig = json!({
        "type": "process", "initialValue": "", "dictionary": {"a": 1, "b": 2},
        "transform": "%acc%%k%", "valueName": "acc", "keyName": "k",
    });
    assert_eq!(b(orig), json!("ab"));
    assert!(
        be(json!({"type": "process", "dictionary": [], "transform": 1}))
            .contains("'initialValue' not found")
    );
}

#[test]
fn foreach_filters_maps_and_limits() {
    let from = json!({"a": 1, "b": 2, "c": 3});
    assert_eq!(
        b(json!({"type": "foreach", "from": from, "where": "@less(@int(1), %item%)"})),
        json!({"b": 2, "c": 3})
    );
    assert_eq!(
        b(json!({"type": "foreach", "from": from, "use": ["%key%"], "top": 2})),
        json!(["a", "b"])
    );
    assert_eq!(
        b(
            json!({"type": "foreach", "from": [1, 2, 3], "item": "x", "where": "@equals(%x%, @int(9))", "noMatchResult": "none"})
        ),
        json!("none")
    );
    assert_eq!(
        b(json!({"type": "foreach", "from": [], "use": [1]})),
        json!([])
    );
    assert_eq!(
        b(
            json!({"type": "foreach", "from": {"a": 1, "b": 2}, "use": {"k%i%": "%v%"}, "key": "i", "item": "v"})
        ),
        json!({"ka": 1, "kb": 2})
    );
    assert!(be(json!({"type": "foreach", "from": from, "where": "x"}))
        .contains("'where' is not boolean"));
    assert!(be(json!({"type": "foreach", "from": [1], "use": 1})).contains("not object/array"));
}

#[test]
fn imports_resolve_through_the_loader_and_are_cached() {
    let calls = std::cell::Cell::new(0);
    let load = |path: &str| {
        calls.set(calls.get() + 1);
        match path {
            "pools.json" => Ok("// comment\n{\"A\": {\"servers\": [\"h:1\"]},}".to_owned()),
            "m.json" => {
                Ok(r#"{"type": "macroDef", "params": ["x"], "result": "<%x%>"}"#.to_owned())
            }
            _ => Err(format!("Can not read {path}")),
        }
    };
    let env = Env {
        globals: Default::default(),
        import: &load,
        ..Env::default()
    };
    let text = r#"{"macros": {"wrap": "@import(m.json)"},
        "a": "@import(pools.json)", "b": "@import(pools.json)", "w": "@wrap(1)",
        "d": {"type": "import", "path": "missing.json", "default": "@int(3)"}}"#;
    let out = expand_text("t.json", text, &env).unwrap();
    assert_eq!(out["a"], json!({"A": {"servers": ["h:1"]}}));
    assert_eq!(out["b"], out["a"]);
    assert_eq!(out["w"], json!("<1>"));
    assert_eq!(out["d"], json!(3));
    assert_eq!(calls.get(), 3, "pools.json is read once");
    let e = expand_text("t.json", "{\n \"a\": \"@import(nope)\"}", &env).unwrap_err();
    assert_eq!(e.line, 2);
    assert!(
        e.to_string().contains("Import 'nope': Can not read nope"),
        "{e}"
    );
    let e = expand_text("t.json", r#"{"a": "@import(x)"}"#, &Env::default()).unwrap_err();
    assert!(e.message.contains("came from no file"), "{e}");
}

#[test]
fn shuffle_with_a_seed_is_mcrouters_order_and_without_one_a_permutation() {
    // std::shuffle(minstd_rand(0)) over 0..5 gave [3, 4, 1, 2, 0] (tests/vectors).
    let list = json!(["a", "b", "c", "d", "e"]);
    let seeded = json!({"type": "shuffle", "dictionary": list, "seed": 0});
    assert_eq!(b(seeded), json!(["d", "e", "b", "c", "a"]));
    assert_eq!(
        b(json!("@shuffle(@range(@int(7),@int(7)),@int(1))")),
        json!([7])
    );
    // mcrouter's own preprocessor cases.
    let two = |seed: u32| b(json!({"type": "shuffle", "dictionary": [1, 3], "seed": seed}));
    assert_eq!(two(11111111), json!([1, 3]));
    assert_eq!(two(123), json!([3, 1]));
    assert_eq!(b(json!({"type": "shuffle", "dictionary": []})), json!([]));
    let mut any = b(json!("@shuffle(@range(@int(1),@int(50)))"));
    let any = any.as_array_mut().unwrap();
    any.sort_by_key(|v| v.as_i64());
    assert_eq!(*any, (1..=50).map(Value::from).collect::<Vec<_>>());
    assert!(be(json!("@shuffle(@int(3))")).contains("Shuffle: argument must be an array"));
    let negative = json!({"type": "shuffle", "dictionary": [1], "seed": -1});
    assert!(be(negative).contains("seed must be a non-negative integer"));
}

#[test]
fn is_local_ip_asks_the_addresses_it_was_given() {
    let local: Vec<std::net::IpAddr> = vec!["127.0.0.1".parse().unwrap(), "::1".parse().unwrap()];
    let env = Env {
        local_ips: Some(&local),
        ..Env::default()
    };
    let ask = |call: &str| {
        let text = format!(r#"{{"r": "{call}"}}"#);
        expand_text("t.json", &text, &env).map(|v| v["r"].clone())
    };
    assert_eq!(ask("@isLocalIp(::1)").unwrap(), json!(true));
    assert_eq!(ask("@isLocalIp([::1])").unwrap(), json!(true));
    assert_eq!(ask("@isLocalIp(::0001)").unwrap(), json!(true));
    assert_eq!(ask("@isLocalIp(not an ip)").unwrap(), json!(false));
    assert_eq!(ask("@isLocalIp(::ffff:127.0.0.1)").unwrap(), json!(true));
    assert_eq!(ask("@isLocalIp(10.9.8.7)").unwrap(), json!(false));
    assert_eq!(
        ask("@isLocalIp(blah)").unwrap(),
        json!(false),
        "not an IP: false"
    );
    let e = ask("@isLocalIp(@int(1))").unwrap_err();
    assert!(e.to_string().contains("isLocalIp: ip is int"), "{e}");
    // Where nobody said which addresses the host has, the call fails rather than guess.
    assert!(be(json!("@isLocalIp(::1)")).contains("Can not enumerate local ips"));
}

#[test]
fn weighted_hash_picks_a_name_as_mcrouter_does() {
    let wh = |dictionary: Value, key: Value| {
        b(json!({"type": "weightedHash", "dictionary": dictionary, "key": key}))
    };
    // mcrouter's own documented example.
    assert_eq!(wh(json!({"a": 0.0, "b": 1.0}), json!(5)), json!("b"));
    let ewn = json!({"east": 1, "west": 2.0, "north": 1});
    let picks: Vec<Value> = (0..8).map(|k| wh(ewn.clone(), json!(k))).collect();
    assert_eq!(
        picks,
        ["east", "east", "west", "west", "east", "west", "west", "west"].map(Value::from)
    );
    // A string key hashes as @hash does; an int key is used as is.
    assert_eq!(wh(ewn.clone(), json!("abcd")), json!("west"));
    assert_eq!(
        wh(ewn.clone(), json!("abcd")),
        wh(ewn.clone(), b(json!("@hash(abcd)")))
    );
    // Arguments are expanded first; a slightly negative weight counts as 0.
    let dict = json!({"a": -0.005, "b": "@double(1)"});
    assert_eq!(wh(dict, json!("@int(7)")), json!("b"));
}

#[test]
fn weighted_hash_errors_are_mcrouters() {
    let whe = |dictionary: Value, key: Value| {
        be(json!({"type": "weightedHash", "dictionary": dictionary, "key": key}))
    };
    assert!(
        whe(json!([1]), json!(1)).contains("WeightedHash: dictionary is array, expected object")
    );
    assert!(whe(json!({}), json!(1)).contains("WeightedHash: dictionary is empty"));
    assert!(whe(json!({"a": "1"}), json!(1))
        .contains("WeightedHash: a weight is string, expected number"));
    assert!(whe(json!({"a": -0.5}), json!(1)).contains("WeightedHash: a weight -0.5 is negative"));
    assert!(whe(json!({"a": 1}), json!(true))
        .contains("WeightedHash: key is boolean, expected string or int"));
    assert!(whe(json!({"a": 1}), json!(1.5))
        .contains("WeightedHash: key is double, expected string or int"));
    assert!(whe(json!({"a": 0, "b": 0}), json!(1))
        .contains("WeightedHash: failed to compute hash: Sum of weights is 0"));
    assert!(be(json!({"type": "weightedHash", "dictionary": {"a": 1}})).contains("key"));
}

// The behaviours mcrouter's own preprocessor tests pin down, with inputs of our own.
#[test]
fn conformance_split_pieces() {
    assert_eq!(b(json!("@split(x-y,)")), json!(["x-y"]));
    assert_eq!(b(json!("@split(,)")), json!([""]));
    assert_eq!(b(json!("@split(xccxcc, c)")), json!(["x", "", "x", "", ""]));
    assert_eq!(b(json!("@split(xccxcc, cc)")), json!(["x", "x", ""]));
}

#[test]
fn conformance_weighted_hash_forms() {
    assert_eq!(
        b(json!({"type": "weightedHash", "dictionary": {"only": 0.25}, "key": 99})),
        json!("only")
    );
    assert_eq!(
        b(json!({"type": "weightedHash", "dictionary": {"off": 0, "on": 1}, "key": "some key"})),
        json!("on")
    );
    // The string form, the dictionary coming from a variable (pick checked against mcrouter).
    assert_eq!(
        b(
            json!({"type": "define", "vars": {"w": {"a": 0, "b": 1, "c": 0.5}},
                 "result": "@weightedHash(%w%, @int(5))"})
        ),
        json!("c")
    );
}

#[test]
fn conformance_bitwise_edges() {
    let min = json!(i64::MIN);
    assert_eq!(b(json!("@bitwiseLeftShift(@int(1), @int(63))")), min);
    assert_eq!(
        b(json!({"type": "bitwiseRightShift", "A": i64::MIN, "B": 63})),
        json!(1)
    );
    assert_eq!(b(json!({"type": "bitwiseNot", "A": -1})), json!(0));
    assert_eq!(b(json!({"type": "bitwiseXor", "A": 6, "B": 3})), json!(5));
}

#[test]
fn every_builtin_is_defined() {
    let names = builtins::names();
    for name in [
        "import",
        "hash",
        "weightedHash",
        "int",
        "double",
        "str",
        "bool",
        "keys",
        "values",
        "merge",
        "select",
        "shuffle",
        "slice",
        "split",
        "range",
        "contains",
        "empty",
        "equals",
        "isArray",
        "isBool",
        "isInt",
        "isDouble",
        "isObject",
        "isString",
        "less",
        "bitwiseAnd",
        "bitwiseOr",
        "bitwiseXor",
        "bitwiseNot",
        "bitwiseLeftShift",
        "bitwiseRightShift",
        "and",
        "or",
        "not",
        "size",
        "add",
        "sub",
        "mul",
        "div",
        "mod",
        "fail",
        "sort",
        "set",
        "if",
        "define",
        "defined",
        "isLocalIp",
        "transform",
        "process",
        "foreach",
        "macroDef",
        "constDef",
    ] {
        assert!(names.contains(&name), "{name}");
    }
    assert_eq!(names.len(), 52);
}

#[test]
fn macro_definition_errors() {
    let e = err(json!({"macros": {"a": "str"}}));
    assert!(e.contains("'a' macro definition is not an object"), "{e}");
    assert!(e.contains("at macros.a"), "{e}");
    let e = err(json!({"macros": {"a": {"result": "a"}}}));
    assert!(e.contains("macro definition: 'type' not found"), "{e}");
    let e =
        err(json!({"macros": {"a": mdef(json!([{"name": "a", "default": 1}, "b"]), json!(1))}}));
    assert!(e.contains("Incorrect defaults/optionals in macro a"), "{e}");
    let e = err(
        json!({"macros": {"a": mdef(json!([{"name": "a", "default": 1, "optional": false}]), json!(1))}}),
    );
    assert!(e.contains("Conflicting options"), "{e}");
    let e = err(json!({"macros": {"a": {"type": "other", "result": 1}}}));
    assert!(e.contains("Unknown macro definition type: other"), "{e}");
    let macros = json!({"a": mdef(json!(["a", {"name": "b", "default": "1"}]), json!("%a%"))});
    let e = err(json!({"macros": macros, "ret": "@a"}));
    assert!(
        e.contains("Too few arguments for macro a. Expected at least 1 got 0"),
        "{e}"
    );
    let e = err(json!({"macros": macros, "ret": "@a(1,2,3)"}));
    assert!(
        e.contains("Too many arguments for macro a. Expected at most 2 got 3"),
        "{e}"
    );
    assert!(be(json!("@nope(1)")).contains("Macro: 'nope' not found"));
}

#[test]
fn errors_name_file_line_path_and_macro() {
    let text = "{\n  \"macros\": {\"bad\": {\"type\": \"macroDef\", \"result\": \"@int(x)\"}},\n  \"route\": {\n    \"list\": [1, \"@bad\"]\n  }\n}";
    let e = expand_text("cfg.json", text, &Env::default()).unwrap_err();
    assert_eq!((e.line, e.path.to_string().as_str()), (4, "route.list[1]"));
    assert_eq!(
        e.to_string(),
        "cfg.json:4:17: at route.list[1]: Macro in string 'bad': Macro in string 'int': Can not cast string to int"
    );
}

#[test]
fn self_reference_hits_the_nesting_limit() {
    let macros = json!({"a": mdef(json!([]), json!("@a"))});
    let e = err(json!({"macros": macros, "ret": "@a"}));
    assert!(
        e.contains("Too many nested macros. Check for cycles."),
        "{e}"
    );
    let macros = json!({"c": {"type": "constDef", "result": "%c%"}});
    assert!(err(json!({"macros": macros, "ret": "%c%"})).contains("Check for cycles"));
}

#[test]
fn expansion_size_is_limited() {
    let e = be(json!("@range(@int(0), @int(1000000000000))"));
    assert!(e.contains("exceeds"), "{e}");
    // Doubling at each level: 2^200 values unless stopped.
    let macros = json!({
        "d": mdef(json!(["n"]), json!({"type": "if", "condition": "@equals(%n%, @int(0))",
            "is_true": "x", "is_false": ["@d(@sub(%n%, @int(1)))", "@d(@sub(%n%, @int(1)))"]}))
    });
    let config = json!({"macros": macros, "ret": "@d(@int(60))"}).to_string();
    let small = Env {
        size_limit: 100_000,
        ..Env::default()
    };
    let e = expand_text("t.json", &config, &small)
        .unwrap_err()
        .to_string();
    assert!(e.contains("exceeds 100000 values"), "{e}");
}

#[test]
fn a_loop_cannot_build_an_unbounded_depth() {
    let e = be(
        json!({"type": "process", "initialValue": [], "dictionary": "@range(@int(0), @int(5000))",
        "transform": ["%value%"]}),
    );
    assert!(e.contains("nests deeper than"), "{e}");
}

/// A config of many macro calls, as large configs are written.
pub(crate) fn generated_config(clusters: usize) -> String {
    let mut text = String::from(
        "{\n  \"macros\": {\n    \"pool\": {\n      \"type\": \"macroDef\",\n      \"params\": [\"host\", {\"name\": \"port\", \"default\": \"11211\"}],\n      \"result\": {\"servers\": [\"%host%:%port%\"]}\n    },\n    \"route\": {\n      \"type\": \"macroDef\",\n      \"params\": [\"name\"],\n      \"result\": {\"type\": \"PoolRoute\", \"pool\": \"%name%\"}\n    }\n  },\n  \"pools\": {\n",
    );
    for i in 0..clusters {
        let sep = if i + 1 < clusters { "," } else { "" };
        text.push_str(&format!(
            "    \"p{i}\": {{\n      \"type\": \"pool\",\n      \"host\": \"127.0.0.{}\"\n    }}{sep}\n",
            i % 250 + 1
        ));
    }
    text.push_str("  },\n  \"routes\": [\n");
    for i in 0..clusters {
        let sep = if i + 1 < clusters { "," } else { "" };
        text.push_str(&format!(
            "    {{\n      \"aliases\": [\"/r/c{i}/\"],\n      \"route\": \"@route(p{i})\"\n    }}{sep}\n"
        ));
    }
    text.push_str("  ]\n}\n");
    text
}

#[test]
fn a_large_generated_config_expands_and_parses() {
    let text = generated_config(200);
    assert!(text.lines().count() >= 1000, "{}", text.lines().count());
    let config = crate::parse_config("big.json", &text).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(config.pools.len(), 200);
    let expanded = expand_text("big.json", &text, &Env::default()).unwrap();
    assert_eq!(
        expanded["pools"]["p7"],
        json!({"servers": ["127.0.0.8:11211"]})
    );
    assert_eq!(
        expanded["routes"][7]["route"],
        json!({"type": "PoolRoute", "pool": "p7"})
    );
}

mod props {
    use super::*;
    use proptest::prelude::*;

    fn plain_json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            "[a-z0-9 /:|]{0,8}".prop_map(Value::from),
        ];
        leaf.prop_recursive(4, 32, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::btree_map("[a-z]{1,4}", inner, 0..4)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest! {
        /// A config with no `@`, `%` or `\` expands to itself.
        #[test]
        fn plain_configs_are_unchanged(v in plain_json()) {
            let config = json!({"c": v});
            prop_assert_eq!(run(config.clone()).unwrap(), config);
        }

        /// Any text in JSONM's syntax expands or fails, without panicking.
        #[test]
        fn call_syntax_never_panics(s in "@a\\([@%(),\\\\a-c0-9 ]{0,20}\\)") {
            let macros = json!({"a": mdef(json!(["x", {"name": "y", "optional": true}]), json!(["%x%", "@b(%x%)"])),
                                "b": mdef(json!(["x"]), json!("@int(%x%)"))});
            let _ = run(json!({"macros": macros, "v": s.clone(), "k": {s: 1}}));
        }
    }
}
