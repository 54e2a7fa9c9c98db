# The subset of nixpkgs' lib that mqlab's flake and images use, re-implemented
# from builtins for evaluation tests. Module properties (mkIf, mkDefault, ...)
# use the same shapes as nixpkgs so nixos.nix can merge them.
let
  b = builtins;
  lib = rec {
    inherit (b) attrNames attrValues elem filter head tail length map toJSON
      concatStringsSep concatMap listToAttrs hasAttr getAttr removeAttrs isAttrs
      isList isString isFunction replaceStrings toString match split
      stringLength substring;

    id = x: x;
    const = x: _: x;
    genAttrs = names: f: b.listToAttrs (b.map (n: { name = n; value = f n; }) names);
    nameValuePair = name: value: { inherit name value; };
    mapAttrs = b.mapAttrs;
    mapAttrs' = f: set: b.listToAttrs (b.map (n: f n set.${n}) (b.attrNames set));
    mapAttrsToList = f: set: b.map (n: f n set.${n}) (b.attrNames set);
    filterAttrs = pred: set:
      b.listToAttrs (b.concatMap (n: if pred n set.${n} then [ { name = n; value = set.${n}; } ] else [ ])
        (b.attrNames set));
    foldl' = b.foldl';
    optional = cond: x: if cond then [ x ] else [ ];
    optionals = cond: xs: if cond then xs else [ ];
    optionalString = cond: s: if cond then s else "";
    optionalAttrs = cond: set: if cond then set else { };
    hasPrefix = p: s: b.substring 0 (b.stringLength p) s == p;
    hasSuffix = sfx: s:
      let ls = b.stringLength s; lx = b.stringLength sfx;
      in ls >= lx && b.substring (ls - lx) lx s == sfx;
    removeSuffix = sfx: s:
      if hasSuffix sfx s then b.substring 0 (b.stringLength s - b.stringLength sfx) s else s;
    toLower = b.replaceStrings
      [ "A" "B" "C" "D" "E" "F" "G" "H" "I" "J" "K" "L" "M" "N" "O" "P" "Q" "R" "S" "T" "U" "V" "W" "X" "Y" "Z" ]
      [ "a" "b" "c" "d" "e" "f" "g" "h" "i" "j" "k" "l" "m" "n" "o" "p" "q" "r" "s" "t" "u" "v" "w" "x" "y" "z" ];
    unique = xs: b.foldl' (acc: x: if b.elem x acc then acc else acc ++ [ x ]) [ ] xs;
    recursiveUpdate = l: r:
      l // b.mapAttrs (n: v: if b.isAttrs v && l ? ${n} && b.isAttrs l.${n} then recursiveUpdate l.${n} v else v) r;
    makeBinPath = ps: b.concatStringsSep ":" (b.map (p: "${p}/bin") ps);
    getName = p: p.pname or p.name;
    getExe = p: "${p}/bin/${p.meta.mainProgram or p.pname or p.name}";
    escapeShellArg = s: "'" + b.replaceStrings [ "'" ] [ "'\\''" ] (b.toString s) + "'";
    escapeShellArgs = xs: b.concatStringsSep " " (b.map escapeShellArg xs);
    fakeHash = "sha256-AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=";
    versions.majorMinor = v:
      let parts = b.filter b.isString (b.split "\\." v);
      in b.concatStringsSep "." (b.filter (x: x != null) [ (b.elemAt parts 0) (if b.length parts > 1 then b.elemAt parts 1 else null) ]);

    # --- module system properties (same shapes as nixpkgs) ---
    mkIf = condition: content: { _type = "if"; inherit condition content; };
    mkMerge = contents: { _type = "merge"; inherit contents; };
    mkOverride = priority: content: { _type = "override"; inherit priority content; };
    mkOptionDefault = mkOverride 1500;
    mkDefault = mkOverride 1000;
    mkForce = mkOverride 50;
    mkOption = attrs: { _type = "option"; } // attrs;
    mkEnableOption = name: mkOption { default = false; description = "Whether to enable ${name}."; type = types.bool; };
    literalExpression = text: { _type = "literalExpression"; inherit text; };
    types =
      let t = name: { _type = "type"; inherit name; };
      in {
        str = t "str"; int = t "int"; bool = t "bool"; port = t "port"; path = t "path";
        lines = t "lines"; package = t "package"; anything = t "anything"; attrs = t "attrs";
        listOf = e: t "listOf"; attrsOf = e: t "attrsOf"; nullOr = e: t "nullOr";
        enum = vs: t "enum"; submodule = m: t "submodule";
      };
  };
in
lib
