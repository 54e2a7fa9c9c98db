# A minimal NixOS module evaluator for tests: loads modules (functions or sets,
# following `imports`), merges their `config` with mkIf/mkMerge/mkOverride and
# option defaults. It does NOT know NixOS' real options: option names and types
# are only checked by the real nixpkgs (`nix flake check` on a networked runner).
{ lib, stubPath, system ? "x86_64-linux", modules ? [ ], specialArgs ? { }, ... }:
let
  b = builtins;
  pkgs = import (stubPath + "/default.nix") { inherit system; };
  args = { inherit lib pkgs config; modulesPath = stubPath + "/modules"; options = { }; } // specialArgs;

  load = m:
    let
      f = if b.isPath m || b.isString m then import m else m;
      v = if b.isFunction f then f args else f;
    in
    [ v ] ++ b.concatMap load (v.imports or [ ]);
  loaded = b.concatMap load modules;
  norm = v:
    if v ? config || v ? options then { options = v.options or { }; config = v.config or { }; }
    else { options = { }; config = b.removeAttrs v [ "imports" "_file" "key" "meta" "disabledModules" ]; };
  normed = b.map norm loaded;

  isOption = v: b.isAttrs v && (v._type or null) == "option";
  optDefaults = o:
    b.listToAttrs (b.concatMap
      (n:
        let v = o.${n}; in
        if isOption v then (if v ? default then [ { name = n; value = lib.mkOptionDefault v.default; } ] else [ ])
        else if b.isAttrs v && !(v ? _type) then [ { name = n; value = optDefaults v; } ]
        else [ ])
      (b.attrNames o));

  flatten = prio: conds: d:
    let t = if b.isAttrs d then d._type or null else null; in
    if t == "merge" then b.concatMap (flatten prio conds) d.contents
    else if t == "override" then flatten d.priority conds d.content
    else if t == "if" then flatten prio (conds ++ [ d.condition ]) d.content
    else [ { inherit prio conds; value = d; } ];

  isPlainSet = v: b.isAttrs v && !(v ? _type) && !(v ? outPath);
  active = it: b.all (c: c) it.conds;

  merge = path: items:
    if items != [ ] && b.all (it: isPlainSet it.value) items then
      let keys = lib.unique (b.concatMap (it: b.attrNames it.value) items);
      in lib.genAttrs keys (k:
        merge (path ++ [ k ]) (b.concatMap (it: if it.value ? ${k} then flatten it.prio it.conds it.value.${k} else [ ]) items))
    else
      let
        act = b.filter active items;
        best = b.foldl' (m: it: if it.prio < m then it.prio else m) 10000 act;
        top = b.map (it: it.value) (b.filter (it: it.prio == best) act);
        where = b.concatStringsSep "." path;
      in
      if act == [ ] then throw "stub nixos: ${where} has no active definition"
      else if b.all b.isList top then b.concatLists top
      else if b.length (lib.unique top) == 1 then b.head top
      else throw "stub nixos: conflicting definitions for ${where}";

  defs = b.concatMap (m: [ m.config (optDefaults m.options) ]) normed;
  config = merge [ ] (b.concatMap (flatten 100 [ ]) defs);
in
{
  _type = "configuration";
  inherit config pkgs;
  options = { };
}
